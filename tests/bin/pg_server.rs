//! A PostgreSQL database for test suites outside Rust (the Python
//! package's): the server the Rust tests use (`$SANDLOG_TEST_PG_URL`, else a
//! throwaway cluster under `target/`, see `sandlog_tests::pg`), and a fresh
//! database on it.
//!
//! Usage: `pg-server` prints the database's connection string on one line,
//! then waits until its stdin closes (the caller exits or closes it) and
//! stops: the throwaway cluster goes with it. No server is an error, with
//! the reason on stderr and a non-zero status: never a skip.

use std::io::{Read, Write};

fn main() -> Result<(), String> {
    let database = sandlog_tests::pg::database()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", database.url).map_err(|error| error.to_string())?;
    out.flush().map_err(|error| error.to_string())?;
    let mut rest = Vec::new();
    // Returns at EOF: the caller is done with the server.
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(database);
    Ok(())
}
