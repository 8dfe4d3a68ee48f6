//! Argument conventions of the built-in runtimes (`python.wasm`,
//! `quickjs.wasm`): how to hand them a code snippet so it runs with `/app`
//! as its current directory.
//!
//! Why this lives here: WASI preview 1 has no current directory. wasi-libc
//! emulates one, starting at `/`, and (unlike a POSIX shell) does not take it
//! from `PWD`; the host cannot set it. So the only way to start a guest "in"
//! `/app` is for the guest to `chdir` itself, and the built-in runtimes are
//! told to, through their command lines.

use super::wasi::WORKSPACE_GUEST_PATH;

/// `python.wasm` arguments that run `code` with `/app` as the current
/// directory.
///
/// `-S` skips importing `site`: that import is work on every run, and the sandboxed
/// CPython has no site-packages to find anyway (the standard library is
/// inside the module; vendored packages come through `PYTHONPATH` and a
/// read-only mount). `-I` is *not* used: it would drop `''` from
/// `sys.path`, so a guest could not import modules it wrote into `/app`, and
/// it would ignore a caller-whitelisted `PYTHONPATH`.
pub fn python_args(code: &str) -> Vec<String> {
    // The prelude runs before the user's code: change into the workspace,
    // then execute the code (popped from `sys.argv`, so the guest sees
    // `sys.argv == ['-c']` as for a plain `-c`) in `__main__`'s namespace,
    // binding no helper names. Tracebacks name it `<string>`, as for `-c`.
    // Both modules are built in and already loaded, so the prelude is free:
    // `os` is not (with `-S`) and importing it costs real fuel on every
    // run, as does the `compile()` builtin, where `exec(str)` costs none.
    // An uncaught exception's traceback starts below the prelude's own
    // frame (the `exec` call), so it shows the user's code only, as `-c`
    // would; a syntax error, which has no frame of the user's, prints
    // without a traceback, as `-c` prints it. The traceback is cut on the
    // exception itself: the default hook prints the exception's own.
    let prelude = format!(
        "__import__('posix').chdir({WORKSPACE_GUEST_PATH:?});\
         __import__('sys').excepthook=lambda t,v,b,h=__import__('sys').__excepthook__:h(t,v.with_traceback(b and b.tb_next),b and b.tb_next);\
         exec(__import__('sys').argv.pop(1))"
    );
    vec!["-S".to_owned(), "-c".to_owned(), prelude, code.to_owned()]
}

/// `quickjs.wasm` arguments that run `code` with `/app` as the current
/// directory, with QuickJS's `std` and `os` modules available as globals.
pub fn javascript_args(code: &str) -> Vec<String> {
    let mut script = format!("os.chdir({WORKSPACE_GUEST_PATH:?});\n");
    script.push_str(code);
    vec!["--std".to_owned(), "-e".to_owned(), script]
}
