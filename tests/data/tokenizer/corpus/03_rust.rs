use std::collections::HashMap;

/// Counts words in `text`.
pub fn word_counts(text: &str) -> HashMap<&str, usize> {
    let mut map = HashMap::new();
    for w in text.split_whitespace() {
        *map.entry(w).or_insert(0) += 1;
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        let m = word_counts("a b a");
        assert_eq!(m["a"], 2);
        assert_eq!(m.get("c"), None);
    }
}
