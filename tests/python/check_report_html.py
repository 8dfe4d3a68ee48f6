#!/usr/bin/env python3
"""Checks a sandlog report (HTML on stdin) with Python's own HTML parser.

Prints one JSON object: {"errors": [...], "text": "..."} where `text` is the
page's text (character references decoded, <style> left out). Errors name:
tags closed out of order or left open, a missing doctype, anything that
could load or run something (<script>, <link>, <img>, <iframe>, src/href
and similar attributes, url() or @import in CSS, event-handler attributes),
and any http://, https:// or // URL in an attribute. Exit status 0 even with
errors: the caller asserts on the list.
"""

import json
import sys
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
        "meta", "source", "track", "wbr"}
LOADING = {"script", "link", "img", "iframe", "frame", "object", "embed",
           "base", "form", "audio", "video", "source", "svg", "math"}
URL_ATTRIBUTES = {"src", "href", "action", "srcset", "poster", "data",
                  "formaction", "background", "ping", "xlink:href"}


class Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.errors = []
        self.text = []

    def where(self):
        line, column = self.getpos()
        return f"line {line}, column {column}"

    def check_attributes(self, tag, attrs):
        for name, value in attrs:
            lowered = (value or "").strip().lower()
            if name in URL_ATTRIBUTES:
                self.errors.append(f"{self.where()}: <{tag} {name}=...> loads something")
            if name.startswith("on"):
                self.errors.append(f"{self.where()}: <{tag} {name}=...> runs script")
            if "http:" in lowered or "https:" in lowered or lowered.startswith("//"):
                self.errors.append(f"{self.where()}: external URL in <{tag} {name}={value!r}>")
            if name == "http-equiv" and lowered == "refresh":
                self.errors.append(f"{self.where()}: <meta http-equiv=refresh>")

    def handle_starttag(self, tag, attrs):
        self.check_attributes(tag, attrs)
        if tag in LOADING:
            self.errors.append(f"{self.where()}: <{tag}> element")
        if tag not in VOID:
            self.stack.append((tag, self.where()))

    def handle_startendtag(self, tag, attrs):
        self.check_attributes(tag, attrs)
        if tag in LOADING:
            self.errors.append(f"{self.where()}: <{tag}> element")
        if tag not in VOID:
            self.errors.append(f"{self.where()}: <{tag}/> is not a void element")

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"{self.where()}: </{tag}> closes a void element")
        elif not self.stack:
            self.errors.append(f"{self.where()}: </{tag}> with nothing open")
        elif self.stack[-1][0] != tag:
            open_tag, opened = self.stack[-1]
            self.errors.append(
                f"{self.where()}: </{tag}> while <{open_tag}> (opened {opened}) is open")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1][0] == "style":
            lowered = data.lower()
            if "url(" in lowered or "@import" in lowered:
                self.errors.append(f"{self.where()}: CSS that loads something")
            return
        self.text.append(data)


def main():
    raw = sys.stdin.buffer.read()
    checker = Checker()
    try:
        html = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        print(json.dumps({"errors": [f"not UTF-8: {error}"], "text": ""}))
        return
    if not html.startswith("<!DOCTYPE html>"):
        checker.errors.append("no <!DOCTYPE html> at the start")
    if "\0" in html:
        checker.errors.append("a NUL character in the document")
    checker.feed(html)
    checker.close()
    for tag, opened in checker.stack:
        checker.errors.append(f"<{tag}> opened {opened} is never closed")
    print(json.dumps({"errors": checker.errors, "text": "".join(checker.text)}))


if __name__ == "__main__":
    main()
