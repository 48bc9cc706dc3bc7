//! Memory the placement layer owns: anonymous mappings (optionally hugetlb), `madvise`,
//! `posix_fadvise`, `mincore`, and the page size. Knows nothing about models.
//!
//! Each [`Region`] is its own mapping between two `PROT_NONE` guard pages, so the kernel never
//! merges it with a neighbouring mapping into one VMA: `/proc/self/numa_maps` (the audit's fallback where
//! `move_pages` is refused) then reports every region on its own line.

use std::ptr::NonNull;

use super::errno::SysError;

/// `madvise` advice values from `<asm-generic/mman-common.h>`.
pub const MADV_DONTNEED: i32 = libc::MADV_DONTNEED;
pub const MADV_HUGEPAGE: i32 = libc::MADV_HUGEPAGE;
pub const MADV_NOHUGEPAGE: i32 = libc::MADV_NOHUGEPAGE;
/// File mappings: read only the faulting page (no read-around), and the default again.
pub const MADV_RANDOM: i32 = libc::MADV_RANDOM;
pub const MADV_NORMAL: i32 = libc::MADV_NORMAL;
/// `posix_fadvise` advice: drop the range from the page cache.
pub const POSIX_FADV_DONTNEED: i32 = libc::POSIX_FADV_DONTNEED;
/// `posix_fadvise` advice: start reading the range into the page cache.
pub const POSIX_FADV_WILLNEED: i32 = libc::POSIX_FADV_WILLNEED;

/// The base page size (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The machine's physical memory in bytes (`sysconf(_SC_PHYS_PAGES)` pages), if known.
pub fn physical_bytes() -> Option<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    u64::try_from(pages)
        .ok()
        .filter(|&p| p > 0)
        .map(|p| p.saturating_mul(page_size() as u64))
}

/// Which pages back a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Base pages (transparent huge pages where the kernel gives them).
    Base,
    /// hugetlb pages of this many bytes (`MAP_HUGETLB`).
    HugeTlb(usize),
}

/// An anonymous read-write mapping of at least `len` bytes, unmapped on drop.
pub struct Region {
    ptr: NonNull<u8>,
    /// Bytes usable by the caller.
    len: usize,
    /// Bytes mapped in all (the usable part rounded up to the page, plus two guard pages).
    map_len: usize,
    /// The page size of the mapping (the guard in front of `ptr` is one such page).
    page: usize,
    backing: Backing,
}

// SAFETY: a Region is plain memory owned by this value; access goes through `&`/`&mut self`,
// so Rust's borrow rules serialise writes, and shared reads from many threads are fine.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only hands out shared slices.
unsafe impl Sync for Region {}

impl Region {
    /// `mmap(NULL, len + guard, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS[|MAP_HUGETLB],
    /// -1, 0)` — fresh zero pages, none faulted in yet, so a policy set with `mbind` before the
    /// first write decides where every page lands. The first and last pages are made
    /// `PROT_NONE` guards.
    pub fn anonymous(len: usize, backing: Backing) -> Result<Region, SysError> {
        let page = match backing {
            Backing::Base => page_size(),
            Backing::HugeTlb(size) => size,
        };
        let body = len.max(1).div_ceil(page) * page;
        let map_len = body + 2 * page;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        match backing {
            // Base pages: commit lazily (the pages are faulted in by the fill).
            Backing::Base => flags |= libc::MAP_NORESERVE,
            // hugetlb: keep the reservation, so a missing page is ENOMEM here rather than
            // SIGBUS at first touch.
            Backing::HugeTlb(size) => {
                flags |=
                    libc::MAP_HUGETLB | ((size.trailing_zeros() as i32) << libc::MAP_HUGE_SHIFT)
            }
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SysError::last("mmap"));
        }
        // SAFETY: both guard pages lie inside the mapping just created.
        let r = unsafe {
            libc::mprotect(p, page, libc::PROT_NONE)
                | libc::mprotect(
                    p.cast::<u8>().add(page + body).cast(),
                    page,
                    libc::PROT_NONE,
                )
        };
        if r != 0 {
            let e = SysError::last("mprotect");
            // SAFETY: unmapping exactly what we mapped above; nothing refers to it.
            unsafe { libc::munmap(p, map_len) };
            return Err(e);
        }
        Ok(Region {
            // SAFETY: mmap succeeded, so p (and p + page, inside the mapping) is not null.
            ptr: unsafe { NonNull::new_unchecked(p.cast::<u8>().add(page)) },
            len,
            map_len,
            page,
            backing,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn backing(&self) -> Backing {
        self.backing
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are mapped readable for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped writable; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The whole usable mapping: `len` rounded up to the region's page size (hugetlb regions
    /// take `mbind` only in whole huge pages).
    pub fn whole_pages(&self) -> &[u8] {
        // SAFETY: the body between the guard pages (map_len minus two pages) is mapped
        // readable for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.map_len - 2 * self.page) }
    }

    /// The first byte's address (for `mbind` and page queries).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns; slices borrowed from it cannot
        // outlive it.
        unsafe { libc::munmap(self.ptr.as_ptr().sub(self.page).cast(), self.map_len) };
    }
}

/// `madvise(addr, len, advice)` — advice about how `region` will be used (madvise(2)). The
/// region is rounded out to whole pages. Only advice that keeps the contents
/// (`MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`, `MADV_RANDOM`, `MADV_NORMAL`) is offered here; see
/// [`drop_file_pages`].
pub fn madvise(region: &[u8], advice: i32) -> Result<(), SysError> {
    if !matches!(
        advice,
        MADV_HUGEPAGE | MADV_NOHUGEPAGE | MADV_RANDOM | MADV_NORMAL
    ) {
        return Err(SysError {
            call: "madvise",
            errno: libc::EINVAL,
        });
    }
    let (start, len) = page_span(region);
    // SAFETY: these advice values change paging behaviour only, never contents.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
    if r != 0 {
        return Err(SysError::last("madvise"));
    }
    Ok(())
}

/// Releases the pages of a read-only file mapping from this process (`madvise(MADV_DONTNEED)`,
/// a later read faults them back in from the file) and then from the page cache
/// (`posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED)`), so no hidden copy of the weights
/// stays resident once they were copied elsewhere.
///
/// # Safety
/// `region` must lie in a private read-only mapping of the file `fd` that nobody has written,
/// mapped from file offset `file_offset` (so dropping the pages loses nothing).
pub unsafe fn drop_file_pages(
    region: &[u8],
    fd: libc::c_int,
    file_offset: u64,
) -> Result<(), SysError> {
    let (start, len) = page_span(region);
    // SAFETY: the caller guarantees the pages are unmodified file pages, so MADV_DONTNEED
    // only drops clean copies that refault with the same bytes.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_DONTNEED) };
    if r != 0 {
        return Err(SysError::last("madvise"));
    }
    fadvise(fd, file_offset, region.len() as u64, POSIX_FADV_DONTNEED)
}

/// `posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)` — asks the kernel to drop a whole file's
/// clean pages from the page cache (for cold-start benchmarks).
pub fn fadvise_dontneed(fd: libc::c_int) -> Result<(), SysError> {
    fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_WILLNEED)` — starts reading a range of a file
/// into the page cache without waiting for it.
pub fn fadvise_willneed(fd: libc::c_int, offset: u64, len: u64) -> Result<(), SysError> {
    fadvise(fd, offset, len, POSIX_FADV_WILLNEED)
}

/// `posix_fadvise(fd, offset, len, advice)`; it returns the error number rather than setting
/// errno.
fn fadvise(fd: libc::c_int, offset: u64, len: u64, advice: i32) -> Result<(), SysError> {
    // SAFETY: advice about an open descriptor; no memory is touched.
    let r = unsafe { libc::posix_fadvise(fd, offset as libc::off_t, len as libc::off_t, advice) };
    if r != 0 {
        return Err(SysError {
            call: "posix_fadvise",
            errno: r,
        });
    }
    Ok(())
}

/// `mincore(addr, len, vec)` — how many bytes of `region`'s pages are resident in memory
/// (for a file mapping: in the page cache, whether or not this process touched them).
pub fn resident_bytes(region: &[u8]) -> Result<u64, SysError> {
    if region.is_empty() {
        return Ok(0);
    }
    let page = page_size();
    let (start, len) = page_span(region);
    let mut vec = vec![0u8; len / page];
    // SAFETY: `vec` holds one byte per page of the range, as mincore writes.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if r != 0 {
        return Err(SysError::last("mincore"));
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
}

/// The page-aligned span covering `region`: (start address, length).
fn page_span(region: &[u8]) -> (usize, usize) {
    let page = page_size();
    let a = region.as_ptr() as usize;
    let start = a / page * page;
    let end = (a + region.len()).div_ceil(page) * page;
    (start, end - start)
}

/// The addresses of every page `region` touches (for `move_pages`).
pub fn page_addresses(region: &[u8]) -> Vec<*mut libc::c_void> {
    let page = page_size();
    let (start, len) = page_span(region);
    (0..len / page)
        .map(|i| (start + i * page) as *mut libc::c_void)
        .collect()
}

/// The memory mappings this process holds now (lines of `/proc/self/maps`), if readable.
pub fn map_count() -> Option<usize> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    Some(maps.iter().filter(|&&b| b == b'\n').count())
}

/// The most memory mappings the kernel lets a process hold (`vm.max_map_count`), if known.
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_zeroed_writable_and_sized() {
        let mut r = Region::anonymous(10_000, Backing::Base).unwrap();
        assert_eq!(r.len(), 10_000);
        assert!(r.as_slice().iter().all(|&b| b == 0));
        r.as_mut_slice()[9_999] = 7;
        assert_eq!(r.as_slice()[9_999], 7);
        assert_eq!(r.addr() % page_size(), 0);
    }

    #[test]
    fn resident_counts_touched_pages() {
        let page = page_size();
        let mut r = Region::anonymous(4 * page, Backing::Base).unwrap();
        assert_eq!(resident_bytes(r.as_slice()).unwrap(), 0);
        r.as_mut_slice()[0] = 1;
        r.as_mut_slice()[2 * page] = 1;
        assert_eq!(resident_bytes(r.as_slice()).unwrap(), 2 * page as u64);
    }

    #[test]
    fn madvise_rejects_destructive_advice() {
        let r = Region::anonymous(page_size(), Backing::Base).unwrap();
        assert_eq!(
            madvise(r.as_slice(), MADV_DONTNEED).unwrap_err().errno,
            libc::EINVAL
        );
        madvise(r.as_slice(), MADV_NOHUGEPAGE).unwrap();
    }

    #[test]
    fn page_addresses_cover_an_unaligned_slice() {
        let page = page_size();
        let r = Region::anonymous(3 * page, Backing::Base).unwrap();
        let s = &r.as_slice()[page - 1..page + 1];
        assert_eq!(page_addresses(s).len(), 2);
    }
}
