//! Shell-style patterns for placement rules: `*` any run of characters, `?` one character,
//! everything else itself. No classes, no escapes: what cgrules and systemd users write for
//! program names and command lines. Matching is O(pattern x text), never exponential.

/// Whether `text` matches `pattern` as a whole.
pub fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it has swallowed up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` take one more character and try again from there.
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert!(matches("pg_dump", "pg_dump"));
        assert!(!matches("pg_dump", "pg_dumpall"));
        assert!(matches("pg_dump*", "pg_dumpall"));
        assert!(matches(
            "postgres: *backup *",
            "postgres: 15/main: backup postgres [local] COPY"
        ));
        assert!(matches(
            "postgres: *backup *",
            "postgres: backup db [local] idle"
        ));
        assert!(!matches(
            "postgres: *backup *",
            "postgres: app db [local] idle"
        ));
        assert!(matches("?sync", "rsync"));
        assert!(matches("*", ""));
        assert!(!matches("?", ""));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches("postgres@*.service", "postgres@15-main.service"));
    }

    #[test]
    fn many_stars_stay_fast() {
        let text = "a".repeat(4096);
        let pattern = format!("{}b", "*a".repeat(128));
        assert!(!matches(&pattern, &text));
    }

    /// The reference: the obvious recursive matcher, on short inputs.
    fn slow(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| slow(rest, &t[i..])),
            Some((&c, rest)) => {
                t.first().is_some_and(|&x| c == '?' || c == x) && slow(rest, &t[1..])
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference(p in "[ab*?]{0,8}", t in "[ab]{0,10}") {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            prop_assert_eq!(matches(&p, &t), slow(&pc, &tc));
        }

        #[test]
        fn never_panics(p in "\\PC{0,40}", t in "\\PC{0,80}") {
            let _ = matches(&p, &t);
        }
    }
}
