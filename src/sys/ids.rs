//! Identifiers and sets of NUMA nodes and CPUs, kept apart by type.
//!
//! `NodeId` and `CpuId` are the kernel's numbers (which may be sparse: nodes 0 and 2, CPUs
//! `0-31,64-95` on one socket). `CpuSet` and `NodeMask` are growable bit sets: their size comes
//! from the kernel's `possible` files, never from a fixed 64 or 512. Both read and write the
//! kernel's range-list format (`0-31,64-95`) used by sysfs and `/proc/self/status`, and convert
//! to and from the `unsigned long` arrays the system calls take.

use std::fmt;

/// A NUMA node number as the kernel gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// A logical CPU number as the kernel gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl CpuId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    /// The bare number, honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for CpuId {
    /// The bare number, honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Largest id a range list may name. Not a hardware cap (the kernel's own limits are 8192 CPUs
/// and 1024 nodes): a guard so that a corrupt file cannot make us allocate gigabytes.
pub const MAX_LIST_ID: usize = 1 << 20;

/// A range list (`0-3,8`) that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListParseError {
    /// The whole list as given (trimmed).
    pub list: String,
    /// The comma-separated item that failed.
    pub item: String,
    pub why: &'static str,
}

impl fmt::Display for ListParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad range list '{}': item '{}' {}",
            self.list, self.item, self.why
        )
    }
}

impl std::error::Error for ListParseError {}

/// The bit set behind `CpuSet` and `NodeMask`: 64-bit words, grown on insert.
#[derive(Clone, Debug, Default)]
struct Bits {
    words: Vec<u64>,
}

impl Bits {
    fn with_capacity(bits: usize) -> Bits {
        Bits {
            words: vec![0; bits.div_ceil(64)],
        }
    }

    fn capacity(&self) -> usize {
        self.words.len() * 64
    }

    fn insert(&mut self, i: usize) {
        let w = i / 64;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    fn remove(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            (0..64)
                .filter(move |b| w & (1u64 << b) != 0)
                .map(move |b| wi * 64 + b)
        })
    }

    fn and(&self, other: &Bits) -> Bits {
        let n = self.words.len().max(other.words.len());
        let get = |b: &Bits, i: usize| b.words.get(i).copied().unwrap_or(0);
        Bits {
            words: (0..n).map(|i| get(self, i) & get(other, i)).collect(),
        }
    }

    fn or(&self, other: &Bits) -> Bits {
        let n = self.words.len().max(other.words.len());
        let get = |b: &Bits, i: usize| b.words.get(i).copied().unwrap_or(0);
        Bits {
            words: (0..n).map(|i| get(self, i) | get(other, i)).collect(),
        }
    }

    /// Kernel layout: bit `i` is bit `i % W` of `unsigned long` number `i / W`, at least
    /// `min_bits` bits long.
    fn to_ulongs(&self, min_bits: usize) -> Vec<libc::c_ulong> {
        const W: usize = libc::c_ulong::BITS as usize;
        let bits = min_bits.max(self.capacity()).max(1);
        let mut out = vec![0 as libc::c_ulong; bits.div_ceil(W)];
        for i in self.iter() {
            out[i / W] |= 1 << (i % W);
        }
        out
    }

    fn from_ulongs(words: &[libc::c_ulong]) -> Bits {
        const W: usize = libc::c_ulong::BITS as usize;
        let mut b = Bits::with_capacity(words.len() * W);
        for (wi, &w) in words.iter().enumerate() {
            for bit in 0..W {
                if w & (1 << bit) != 0 {
                    b.insert(wi * W + bit);
                }
            }
        }
        b
    }

    fn parse_list(text: &str) -> Result<Bits, ListParseError> {
        let list = text.trim();
        let mut b = Bits::default();
        let err = |item: &str, why| ListParseError {
            list: list.to_string(),
            item: item.to_string(),
            why,
        };
        if list.is_empty() {
            return Ok(b);
        }
        let num = |item: &str, s: &str| -> Result<usize, ListParseError> {
            let v: usize = s
                .trim()
                .parse()
                .map_err(|_| err(item, "is not a number or range"))?;
            if v > MAX_LIST_ID {
                return Err(err(item, "names an id beyond 2^20"));
            }
            Ok(v)
        };
        for item in list.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(err(item, "is empty"));
            }
            let (lo, hi) = match item.split_once('-') {
                Some((a, z)) => (num(item, a)?, num(item, z)?),
                None => {
                    let v = num(item, item)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(err(item, "runs backwards"));
            }
            for i in lo..=hi {
                b.insert(i);
            }
        }
        Ok(b)
    }

    fn fmt_list(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.iter().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl PartialEq for Bits {
    /// Equal when the same bits are set, whatever the capacities.
    fn eq(&self, other: &Bits) -> bool {
        let n = self.words.len().max(other.words.len());
        let get = |b: &Bits, i: usize| b.words.get(i).copied().unwrap_or(0);
        (0..n).all(|i| get(self, i) == get(other, i))
    }
}

impl Eq for Bits {}

macro_rules! id_set {
    ($(#[$doc:meta])* $name:ident, $id:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            bits: Bits,
        }

        impl $name {
            /// An empty set with room for ids `0..capacity` (it grows if more are inserted).
            pub fn with_capacity(capacity: usize) -> $name {
                $name {
                    bits: Bits::with_capacity(capacity),
                }
            }

            /// Parses a kernel range list such as `0-31,64-95` (empty text = empty set).
            pub fn parse_list(text: &str) -> Result<$name, ListParseError> {
                Bits::parse_list(text).map(|bits| $name { bits })
            }

            /// The kernel's range-list form, e.g. `0-31,64-95`; empty for an empty set.
            pub fn to_list(&self) -> String {
                self.to_string()
            }

            /// Bits currently allocated (a multiple of 64).
            pub fn capacity(&self) -> usize {
                self.bits.capacity()
            }

            pub fn insert(&mut self, id: $id) {
                self.bits.insert(id.index());
            }

            pub fn remove(&mut self, id: $id) {
                self.bits.remove(id.index());
            }

            pub fn contains(&self, id: $id) -> bool {
                self.bits.contains(id.index())
            }

            pub fn len(&self) -> usize {
                self.bits.count()
            }

            pub fn is_empty(&self) -> bool {
                self.bits.count() == 0
            }

            /// The members in ascending order.
            pub fn iter(&self) -> impl Iterator<Item = $id> + '_ {
                self.bits.iter().map(|i| $id(i as u32))
            }

            pub fn first(&self) -> Option<$id> {
                self.iter().next()
            }

            pub fn intersection(&self, other: &$name) -> $name {
                $name {
                    bits: self.bits.and(&other.bits),
                }
            }

            pub fn union(&self, other: &$name) -> $name {
                $name {
                    bits: self.bits.or(&other.bits),
                }
            }

            /// The set as the kernel's `unsigned long` array, at least `min_bits` bits long.
            pub fn to_ulongs(&self, min_bits: usize) -> Vec<libc::c_ulong> {
                self.bits.to_ulongs(min_bits)
            }

            /// Reads the kernel's `unsigned long` array.
            pub fn from_ulongs(words: &[libc::c_ulong]) -> $name {
                $name {
                    bits: Bits::from_ulongs(words),
                }
            }
        }

        impl FromIterator<$id> for $name {
            fn from_iter<I: IntoIterator<Item = $id>>(iter: I) -> $name {
                let mut s = $name::default();
                for id in iter {
                    s.insert(id);
                }
                s
            }
        }

        impl fmt::Display for $name {
            /// The range-list form, `0-31,64-95`.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.bits.fmt_list(f)
            }
        }
    };
}

id_set!(
    /// A set of CPUs, as in `sched_setaffinity` masks and `cpulist` files.
    CpuSet,
    CpuId
);

id_set!(
    /// A set of NUMA nodes, as in `mbind`/`set_mempolicy` node masks and `node/online`.
    NodeMask,
    NodeId
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::qc;

    #[test]
    fn parses_and_formats_interleaved_epyc_numbering() {
        let s = CpuSet::parse_list("0-31,64-95\n").unwrap();
        assert_eq!(s.len(), 64);
        assert!(s.contains(CpuId(0)) && s.contains(CpuId(95)));
        assert!(!s.contains(CpuId(32)) && !s.contains(CpuId(96)));
        assert_eq!(s.to_list(), "0-31,64-95");
        assert_eq!(CpuSet::parse_list("3").unwrap().to_list(), "3");
        assert_eq!(CpuSet::parse_list("1,2,3,5").unwrap().to_list(), "1-3,5");
        assert!(CpuSet::parse_list("").unwrap().is_empty());
        assert!(CpuSet::parse_list("  \n").unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_lists_with_the_item() {
        for bad in ["a", "1-", "3-1", "1,,2", "0-99999999", "-1"] {
            let e = NodeMask::parse_list(bad).unwrap_err();
            assert!(!e.why.is_empty(), "{bad}");
            assert!(e.to_string().contains(bad.trim()), "{e}");
        }
    }

    #[test]
    fn capacity_is_not_fixed() {
        let mut s = NodeMask::with_capacity(4);
        assert_eq!(s.capacity(), 64);
        s.insert(NodeId(1000));
        assert!(s.capacity() >= 1001);
        assert_eq!(s.len(), 1);
        let mut c = CpuSet::with_capacity(0);
        c.insert(CpuId(8191));
        assert_eq!(c.to_list(), "8191");
    }

    #[test]
    fn equality_ignores_capacity() {
        let a = NodeMask::parse_list("0,2").unwrap();
        let mut b = NodeMask::with_capacity(1024);
        b.insert(NodeId(2));
        b.insert(NodeId(0));
        assert_eq!(a, b);
    }

    #[test]
    fn ulongs_round_trip_and_keep_min_size() {
        let s = NodeMask::parse_list("0,2,65").unwrap();
        let w = s.to_ulongs(1024);
        assert_eq!(w.len() * libc::c_ulong::BITS as usize, 1024);
        assert_eq!(NodeMask::from_ulongs(&w), s);
    }

    #[test]
    fn list_round_trips() {
        fn prop(ids: Vec<u16>) -> bool {
            let s: CpuSet = ids.iter().map(|&i| CpuId(i as u32)).collect();
            let back = CpuSet::parse_list(&s.to_list()).unwrap();
            back == s
                && back.len() == {
                    let mut v = ids.clone();
                    v.sort_unstable();
                    v.dedup();
                    v.len()
                }
        }
        qc::check("list_round_trips", prop as fn(Vec<u16>) -> bool);
    }

    #[test]
    fn intersection_is_membership_and() {
        fn prop(a: Vec<u8>, b: Vec<u8>) -> bool {
            let sa: NodeMask = a.iter().map(|&i| NodeId(i as u32)).collect();
            let sb: NodeMask = b.iter().map(|&i| NodeId(i as u32)).collect();
            let both = sa.intersection(&sb);
            (0..256u32).all(|i| {
                both.contains(NodeId(i)) == (sa.contains(NodeId(i)) && sb.contains(NodeId(i)))
            })
        }
        qc::check(
            "intersection_is_membership_and",
            prop as fn(Vec<u8>, Vec<u8>) -> bool,
        );
    }
}
