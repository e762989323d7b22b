//! libFuzzer entry for epp_fuzz::byte_words (the target's doc says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| epp_fuzz::byte_words::run(data));
