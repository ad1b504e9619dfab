//! Exposed names of tools and prompts: `<prefix><separator><name>`, made valid
//! for where they end up, deterministically and injectively.
//!
//! Rules: [`ToolNameRule::Strict`] allows 1–64 chars of `[A-Za-z0-9_-]` (what
//! common LLM hosts enforce); [`ToolNameRule::Spec`] allows the 2025-11-25
//! spec's 1–128 chars of `[A-Za-z0-9_.-]` (`../shared/spec/2025-11-25/schema.json`
//! `Tool.name`). A name that does not fit is sanitized (bad chars → `_`),
//! shortened, and given a suffix of 8 hex digits of the FNV-1a hash of the
//! original name, so the same upstream name maps to the same exposed name
//! after every restart and two different names cannot meet by sanitizing.

use crate::config::ToolNameRule;

/// FNV-1a, 64-bit: a stable hash (not `DefaultHasher`, whose output may change between Rust releases).
pub fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The longest exposed name under any rule (`Spec`'s): a call to a longer
/// name cannot match one and is refused before it is looked up.
pub const LONGEST: usize = 128;

fn max_len(rule: ToolNameRule) -> usize {
    match rule {
        ToolNameRule::Strict => 64,
        ToolNameRule::Spec => LONGEST,
    }
}

fn allowed(rule: ToolNameRule, c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || (rule == ToolNameRule::Spec && c == '.')
}

/// True if `name` is valid under `rule`.
pub fn is_valid(rule: ToolNameRule, name: &str) -> bool {
    !name.is_empty() && name.len() <= max_len(rule) && name.chars().all(|c| allowed(rule, c))
}

/// The exposed name of upstream name `original` under `prefix` and `separator`
/// (no separator when the prefix is empty). Always valid under `rule`.
pub fn expose(rule: ToolNameRule, prefix: &str, separator: &str, original: &str) -> String {
    let joined = if prefix.is_empty() {
        original.to_string()
    } else {
        format!("{prefix}{separator}{original}")
    };
    if is_valid(rule, &joined) {
        return joined;
    }
    hashed(rule, &joined, original)
}

/// The sanitized, shortened, hash-suffixed form of `joined`.
pub fn hashed(rule: ToolNameRule, joined: &str, original: &str) -> String {
    let suffix = format!("_{:08x}", fnv1a(original) as u32);
    let keep = max_len(rule) - suffix.len();
    let mut s: String = joined
        .chars()
        .map(|c| if allowed(rule, c) { c } else { '_' })
        .take(keep)
        .collect();
    s.push_str(&suffix);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ToolNameRule::*;

    #[test]
    fn plain_names_are_prefixed() {
        assert_eq!(expose(Strict, "fs", "__", "read_file"), "fs__read_file");
        assert_eq!(expose(Strict, "", "__", "read_file"), "read_file");
    }

    #[test]
    fn dots_depend_on_rule() {
        assert_eq!(expose(Spec, "a", "__", "x.y"), "a__x.y");
        let s = expose(Strict, "a", "__", "x.y");
        assert!(is_valid(Strict, &s) && s.starts_with("a__x_y_"), "{s}");
        // Sanitizing alone would make these two equal; the hash keeps them apart.
        assert_ne!(
            expose(Strict, "a", "__", "x.y"),
            expose(Strict, "a", "__", "x_y")
        );
    }

    #[test]
    fn long_names_are_cut_deterministically() {
        let long = "t".repeat(100);
        let a = expose(Strict, "up", "__", &long);
        assert_eq!(a.len(), 64);
        assert_eq!(a, expose(Strict, "up", "__", &long));
        assert_ne!(a, expose(Strict, "up", "__", &"t".repeat(101)));
        assert_eq!(expose(Spec, "up", "__", &long).len(), 104);
    }

    #[test]
    fn unicode_is_sanitized() {
        let s = expose(Strict, "up", "__", "météo");
        assert!(is_valid(Strict, &s), "{s}");
    }
}
