//! CPU caches from sysfs (`/sys/devices/system/cpu/cpuN/cache/index*/`): the size of the last
//! level a CPU reads through, so callers can tell whether a working set streams from memory.

use std::path::Path;

/// The sysfs directory of CPU `cpu`'s caches.
fn cache_dir(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/cache")
}

/// Bytes of the highest-level data or unified cache of CPU `cpu` (the L3 on most x86 hosts),
/// or `None` where sysfs does not say (some containers and VMs).
pub fn last_level_bytes(cpu: usize) -> Option<u64> {
    last_level_bytes_in(Path::new(&cache_dir(cpu)))
}

fn last_level_bytes_in(dir: &Path) -> Option<u64> {
    let read = |p: &Path, f: &str| std::fs::read_to_string(p.join(f)).ok();
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            let kind = read(&p, "type")?;
            if kind.trim() == "Instruction" {
                return None;
            }
            let level: u32 = read(&p, "level")?.trim().parse().ok()?;
            Some((level, parse_size(&read(&p, "size")?)?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// A sysfs cache size: `48K`, `2048K`, `260M` or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, scale) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_their_suffixes() {
        assert_eq!(parse_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_size("266240K"), Some(266_240 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn the_highest_data_or_unified_level_wins() {
        let dir = std::env::temp_dir().join(format!("locus-cache-{}", std::process::id()));
        let index = |i: u32, level: &str, kind: &str, size: &str| {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        index(0, "1", "Data", "48K");
        index(1, "1", "Instruction", "32K");
        index(2, "2", "Unified", "2048K");
        assert_eq!(last_level_bytes_in(&dir), Some(2048 << 10));
        index(3, "3", "Unified", "266240K");
        index(4, "4", "Instruction", "999M");
        assert_eq!(last_level_bytes_in(&dir), Some(266_240 << 10));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(last_level_bytes_in(&dir), None);
    }
}
