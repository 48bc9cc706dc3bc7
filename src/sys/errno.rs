//! System-call failures as values: [`SysError`] carries the call's name and the raw errno, and
//! [`errno_name`] gives the symbolic name (`EPERM`) that users search for. Every wrapper in
//! `sys` returns `Result<_, SysError>`, never a bool, so callers can tell "refused by seccomp"
//! (EPERM) from "kernel without NUMA" (ENOSYS) from a bad argument (EINVAL).

use std::fmt;

/// An errno from a failed system call, with the call's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysError {
    pub call: &'static str,
    pub errno: i32,
}

impl SysError {
    /// The errno of the last failed libc call on this thread, attributed to `call`.
    pub fn last(call: &'static str) -> SysError {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        SysError { call, errno }
    }

    /// `EPERM (Operation not permitted)`, or `errno 123 (…)` for a number without a known name.
    pub fn errno_text(&self) -> String {
        let msg = std::io::Error::from_raw_os_error(self.errno);
        let msg = msg.to_string();
        // std's message ends with " (os error N)"; the symbolic name says the same thing better.
        let msg = msg.split(" (os error").next().unwrap_or("").to_string();
        match errno_name(self.errno) {
            Some(name) => format!("{name} ({msg})"),
            None => format!("errno {} ({msg})", self.errno),
        }
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.errno_text())
    }
}

impl std::error::Error for SysError {}

/// Maps a raw return value of `libc::syscall` to `Result`: `-1` becomes the thread's errno.
pub(crate) fn check(call: &'static str, r: libc::c_long) -> Result<libc::c_long, SysError> {
    if r == -1 {
        Err(SysError::last(call))
    } else {
        Ok(r)
    }
}

/// The symbolic name of the errno values the NUMA and affinity calls can return.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return None,
    };
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_call_and_the_errno() {
        let e = SysError {
            call: "mbind",
            errno: libc::EPERM,
        };
        let s = e.to_string();
        assert!(s.starts_with("mbind failed: EPERM ("), "{s}");
        assert!(!s.contains("os error"), "{s}");
        let unknown = SysError {
            call: "x",
            errno: 4000,
        };
        assert!(unknown.errno_text().starts_with("errno 4000"));
    }

    /// Sets this thread's errno, as a failed libc call would.
    fn set_errno(value: i32) {
        // SAFETY: `__errno_location` returns this thread's errno slot, valid for the thread's
        // life; writing an int there is what libc itself does on failure.
        unsafe { *libc::__errno_location() = value };
    }

    #[test]
    fn check_maps_minus_one_only() {
        // -1 is the failure: it carries the thread's errno at that moment and the call's name.
        set_errno(libc::ENOSYS);
        assert_eq!(
            check("move_pages", -1),
            Err(SysError {
                call: "move_pages",
                errno: libc::ENOSYS
            })
        );
        set_errno(libc::EPERM);
        assert_eq!(check("mbind", -1).unwrap_err().errno, libc::EPERM);
        // Every other value is a success, even with a stale errno left on the thread (a raw
        // syscall never returns another negative value through libc's wrapper, but the mapping
        // must not guess).
        for r in [0, 1, 7, -2, libc::c_long::MIN, libc::c_long::MAX] {
            assert_eq!(check("x", r), Ok(r), "{r}");
        }
    }
}
