//! The bearer token: where it comes from and how it is compared.

use std::io::Read;
use std::path::Path;

use crate::ServeError;
use crate::limits::{TOKEN_BYTES_MAX, TOKEN_BYTES_MIN};

/// The environment variable holding the token when no file is named.
pub const TOKEN_ENV: &str = "SANDLOG_TOKEN";

/// A token, kept as its blake3 hash: comparing two hashes of equal length
/// with `blake3::Hash`'s constant-time equality reveals nothing about how
/// much of a guess matched.
#[derive(Clone)]
pub struct Token(blake3::Hash);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Checks a token's text (surrounding whitespace removed).
    pub fn new(text: &str) -> Result<Token, ServeError> {
        let text = text.trim();
        if text.len() < TOKEN_BYTES_MIN || text.len() > TOKEN_BYTES_MAX {
            return Err(ServeError::BadToken(format!(
                "the token is {} bytes; it must be {TOKEN_BYTES_MIN} to {TOKEN_BYTES_MAX} (make one with `head -c 32 /dev/urandom | base64`)",
                text.len()
            )));
        }
        if text.bytes().any(|byte| !byte.is_ascii_graphic()) {
            return Err(ServeError::BadToken(
                "the token holds spaces or control characters; it must be printable ASCII (an HTTP header value)".into(),
            ));
        }
        Ok(Token(blake3::hash(text.as_bytes())))
    }

    /// Whether `offered` is this token, in time independent of where they
    /// differ.
    pub fn matches(&self, offered: &[u8]) -> bool {
        blake3::hash(offered) == self.0
    }

    /// The token from `file`, else from `$SANDLOG_TOKEN`, else none.
    pub fn load(file: Option<&Path>) -> Result<Option<Token>, ServeError> {
        if let Some(path) = file {
            let context = format!("reading the token file {}", path.display());
            let file = std::fs::File::open(path).map_err(ServeError::io(context.clone()))?;
            let mut text = String::new();
            file.take(TOKEN_BYTES_MAX as u64 + 2)
                .read_to_string(&mut text)
                .map_err(ServeError::io(context))?;
            return Token::new(&text).map(Some);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(text) => Token::new(&text).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(ServeError::BadToken(format!(
                "${TOKEN_ENV} is not valid UTF-8"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_odd_tokens_are_refused() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("0123456789abcdef with space").is_err());
        assert!(Token::new(&"x".repeat(TOKEN_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn only_the_token_matches() -> Result<(), ServeError> {
        let token = Token::new(" 0123456789abcdef\n")?;
        assert!(token.matches(b"0123456789abcdef"));
        assert!(!token.matches(b"0123456789abcdeF"));
        assert!(!token.matches(b""));
        Ok(())
    }
}
