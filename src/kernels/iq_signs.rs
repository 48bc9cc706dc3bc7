//! The sign tables of ggml's IQ2/IQ3 types, derived: a group of eight values stores seven sign
//! bits, and the eighth sign makes the count of negative values even.

/// The eight sign bits of a 7-bit index `i`: bit `j` set where value `j` is negative, bit 7 the
/// parity of the seven (ggml's `ksigns_iq2xs`).
pub static KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u32).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
};

/// Eight sign bits as eight bytes of ±1 (bit `j` set: byte `j` is −1), for `vpsignb` (ggml's
/// x86 `keven_signs_q2xs` is this at [`KSIGNS`]' entries).
pub static SIGN_BYTES: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut j = 0;
        while j < 8 {
            let v: u8 = if b >> j & 1 == 1 { 0xff } else { 0x01 };
            t[b] |= (v as u64) << (8 * j);
            j += 1;
        }
        b += 1;
    }
    t
};

/// [`SIGN_BYTES`] at each 7-bit index's [`KSIGNS`] entry: one lookup from a stored index
/// (ggml's x86 `keven_signs_q2xs`).
pub static EVEN_SIGN_BYTES: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = SIGN_BYTES[KSIGNS[i] as usize];
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sign_pattern_has_an_even_count_of_negatives_and_its_seven_bits() {
        for (i, &s) in KSIGNS.iter().enumerate() {
            assert_eq!(s.count_ones() % 2, 0, "pattern {i}");
            assert_eq!(usize::from(s & 0x7f), i);
            for j in 0..8 {
                let b = (SIGN_BYTES[usize::from(s)] >> (8 * j)) as u8 as i8;
                assert_eq!(
                    b,
                    if s >> j & 1 == 1 { -1 } else { 1 },
                    "pattern {i} value {j}"
                );
            }
        }
        for (i, &s) in KSIGNS.iter().enumerate() {
            assert_eq!(EVEN_SIGN_BYTES[i], SIGN_BYTES[usize::from(s)], "index {i}");
        }
        // ggml's first entries, as its table lists them.
        assert_eq!(KSIGNS[..8], [0, 129, 130, 3, 132, 5, 6, 135]);
    }
}
