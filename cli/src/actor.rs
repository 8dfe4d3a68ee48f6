//! Who acts: the actor recorded on every event a command appends.

/// Who acts, recorded on every event a command appends: `--actor`, else
/// `$SANDLOG_ACTOR`, else the OS user name (`$USER`, else `$LOGNAME`, else
/// the name the password database gives the uid), else `uid:<n>` for a
/// uid without a name. Never "unknown": an event must say who did it.
pub fn actor(flag: Option<&str>) -> String {
    let named = |value: Option<String>| value.filter(|name| !name.trim().is_empty());
    named(flag.map(str::to_owned))
        .or_else(|| named(std::env::var("SANDLOG_ACTOR").ok()))
        .or_else(|| named(std::env::var("USER").ok()))
        .or_else(|| named(std::env::var("LOGNAME").ok()))
        .unwrap_or_else(os_user_name)
}

/// The password database's name for this process's uid, else `uid:<n>`.
fn os_user_name() -> String {
    #[expect(unsafe_code, reason = "getuid has no preconditions")]
    let uid = unsafe { libc::getuid() };
    let mut entry = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buffer = vec![0 as libc::c_char; PASSWD_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // getpwuid_r writes the entry into `entry` and its strings into
    // `buffer`, both ours and alive for the call; `found` is null unless
    // an entry was written.
    #[expect(unsafe_code, reason = "getpwuid_r fills buffers we own")]
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            entry.as_mut_ptr(),
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status == 0 && !found.is_null() {
        // `found` points at `entry`, whose `pw_name` points into `buffer`
        // as a NUL-terminated string.
        #[expect(unsafe_code, reason = "pw_name is a C string in our buffer")]
        let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
        let name = name.to_string_lossy();
        if !name.is_empty() {
            return name.into_owned();
        }
    }
    format!("uid:{uid}")
}

/// Bytes for the strings of one password entry (name, home, shell, …).
const PASSWD_BUFFER_BYTES: usize = 4096;
