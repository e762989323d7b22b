use super::*;

fn all(page: &str) -> (Vec<Sample<'_>>, usize) {
    let mut it = parse_all(page.as_bytes());
    let samples: Vec<_> = it.by_ref().collect();
    (samples, it.malformed_lines())
}

fn pairs<'a>(s: &Sample<'a>) -> Vec<(&'a str, String)> {
    s.labels.iter().map(|(n, v)| (n, v.into_owned())).collect()
}

#[test]
fn parses_names_with_colons_labels_and_values() {
    let page = "# HELP vllm:x help text\n# TYPE vllm:x gauge\nvllm:x{engine=\"0\",model_name=\"m\"} 14.0\n";
    let (samples, bad) = all(page);
    assert_eq!(bad, 0);
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].name, "vllm:x");
    assert_eq!(samples[0].value, 14.0);
    assert_eq!(samples[0].timestamp_ms, None);
    assert_eq!(pairs(&samples[0]), vec![("engine", "0".to_string()), ("model_name", "m".to_string())]);
    assert_eq!(samples[0].labels.get("model_name").as_deref(), Some("m"));
    assert_eq!(samples[0].labels.get("absent"), None);
}

#[test]
fn quoted_commas_braces_and_escapes_in_values() {
    let page = r#"m{a="x,y}z",b="q\"uote",c="back\\slash",d="new\nline"} 1"#;
    let (samples, bad) = all(page);
    assert_eq!(bad, 0);
    let got = pairs(&samples[0]);
    assert_eq!(got[0], ("a", "x,y}z".to_string()));
    assert_eq!(got[1], ("b", "q\"uote".to_string()));
    assert_eq!(got[2], ("c", "back\\slash".to_string()));
    assert_eq!(got[3], ("d", "new\nline".to_string()));
    assert!(matches!(samples[0].labels.get("a"), Some(Cow::Borrowed(_))), "no escape, no copy");
}

#[test]
fn special_floats_exponents_and_timestamps() {
    let page = "a +Inf\nb -Inf\nc NaN\nd 1.5e+07\ne 2.457e-06 1700000000000\nf{} 3 -5\ng 7\t\n";
    let (samples, bad) = all(page);
    assert_eq!(bad, 0);
    assert_eq!(samples[0].value, f64::INFINITY);
    assert_eq!(samples[1].value, f64::NEG_INFINITY);
    assert!(samples[2].value.is_nan());
    assert_eq!(samples[3].value, 1.5e7);
    assert_eq!(samples[4].value, 2.457e-6);
    assert_eq!(samples[4].timestamp_ms, Some(1_700_000_000_000));
    assert_eq!(samples[5].timestamp_ms, Some(-5));
    assert!(samples[5].labels.is_empty());
    assert_eq!(samples[6].value, 7.0);
}

#[test]
fn crlf_blank_lines_comments_and_trailing_comma() {
    let page = "\r\n# just a comment\r\n\r\n   \r\nx{a=\"1\",} 2\r\n  y 3\r\n";
    let (samples, bad) = all(page);
    assert_eq!(bad, 0);
    assert_eq!(samples.len(), 2);
    assert_eq!(samples[0].labels.get("a").as_deref(), Some("1"));
    assert_eq!(samples[0].value, 2.0);
    assert_eq!(samples[1].name, "y");
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let page = concat!(
        "good 1\n",
        "1bad 2\n",              // name starts with a digit
        "novalue\n",             // no value
        "x{a=\"1\" 3\n",         // unclosed block
        "x{a=1} 3\n",            // unquoted value
        "x{a=\"\\q\"} 3\n",      // unknown escape
        "x 1 2 3\n",             // too many tokens
        "x abc\n",               // not a number
        "x 1 1.5\n",             // timestamp not an integer
        "x! 1\n",                // bad char after name
        "x{=\"v\"} 1\n",         // empty label name
        "x{a=\"1\"b=\"2\"} 1\n", // missing comma
        "also_good{a=\"\"} 4\n",
    );
    let (samples, bad) = all(page);
    assert_eq!(samples.iter().map(|s| s.name).collect::<Vec<_>>(), vec!["good", "also_good"]);
    assert_eq!(bad, 11);
}

#[test]
fn filter_skips_unwanted_lines_and_prefix_names() {
    let page = "vllm:a 1\nvllm:ab 2\nvllm:a_bucket{le=\"1\"} 3\nvllm:a{x=\"y\"} 4\nvllm:b 5\n";
    let wanted = ["vllm:a"];
    let got: Vec<f64> = SampleIter::new(page.as_bytes(), &wanted[..]).map(|s| s.value).collect();
    assert_eq!(got, vec![1.0, 4.0]);
}

#[test]
fn filter_does_not_validate_unwanted_lines() {
    let page = "other{broken 1\nwanted 2\n";
    let wanted = vec!["wanted".to_string()];
    let mut it = SampleIter::new(page.as_bytes(), &wanted);
    assert_eq!(it.next().map(|s| s.value), Some(2.0));
    assert_eq!(it.malformed_lines(), 0);
}

#[test]
fn parses_the_vllm_sample_page_cleanly() {
    let page = crate::telemetry::test_data::sample_page("vllm-v1-metrics.txt");
    let mut it = parse_all(&page);
    let n = it.by_ref().count();
    assert_eq!(it.malformed_lines(), 0);
    assert_eq!(n, 62);
    let lora = parse_all(&page).find(|s| s.name == "vllm:lora_requests_info").unwrap();
    assert_eq!(lora.labels.get("running_lora_adapters").as_deref(), Some("food-review-1"));
    assert_eq!(lora.labels.get("waiting_lora_adapters").as_deref(), Some(""));
    assert_eq!(lora.value, 1.7559318e9);
}

/// A small deterministic generator so the fuzz-like tests need no extra crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let alphabet = b"vllm:_{}=\",\\n# \t\r\n01.e+-InfNa\xff\xc3";
    for round in 0..2000 {
        let len = (rng.next() % 300) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if round % 2 == 0 {
                    alphabet[(rng.next() % alphabet.len() as u64) as usize]
                } else {
                    rng.next() as u8
                }
            })
            .collect();
        for s in parse_all(&bytes) {
            // Touch every label so the lazy decoding is exercised too.
            for (n, v) in s.labels.iter() {
                assert!(!n.is_empty());
                let _ = v.len();
            }
        }
    }
}

#[test]
fn every_truncation_and_mutation_of_a_real_page_never_panics() {
    let page = crate::telemetry::test_data::sample_page("vllm-v1-metrics.txt");
    for cut in 0..page.len() {
        for s in parse_all(&page[..cut]) {
            let _ = s.labels.iter().count();
        }
    }
    let mut rng = XorShift(42);
    for _ in 0..500 {
        let mut mutated = page.clone();
        for _ in 0..8 {
            let at = (rng.next() as usize) % mutated.len();
            mutated[at] = rng.next() as u8;
        }
        let mut it = parse_all(&mutated);
        for s in it.by_ref() {
            let _ = s.labels.get("engine");
        }
        let _ = it.malformed_lines();
    }
}

#[test]
fn unwanted_samples_are_counted_and_comments_are_not() {
    let wanted = ["vllm:a".to_string()];
    let page = "# HELP vllm:a a\n# TYPE vllm:a gauge\nvllm:a 1\n\n# TYPE vllm:b_total counter\nvllm:b_total 2\nvllm:a_bucket{le=\"1\"} 3\n";
    let mut it = SampleIter::new(page.as_bytes(), wanted.as_slice());
    assert_eq!(it.by_ref().map(|s| s.name).collect::<Vec<_>>(), ["vllm:a"]);
    assert_eq!((it.unwanted_samples(), it.malformed_lines()), (2, 0));
    let mut only_wanted = SampleIter::new(b"# HELP vllm:a a\nvllm:a 1\n".as_slice(), wanted.as_slice());
    assert_eq!(only_wanted.by_ref().count(), 1);
    assert_eq!(only_wanted.unwanted_samples(), 0);
}
