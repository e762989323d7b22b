//! libFuzzer entry for epp_fuzz::kv_events (the target's doc says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| epp_fuzz::kv_events::run(data));
