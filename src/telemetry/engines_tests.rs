use super::*;

fn params(json: serde_json::Value) -> ExtractorParams {
    serde_json::from_value(json).unwrap()
}

fn spec_text(spec: &Option<MetricSpec>) -> Option<String> {
    spec.as_ref().map(std::string::ToString::to_string)
}

#[test]
fn builtins_match_the_reference_table() {
    let set = EngineSet::builtin();
    assert_eq!(set.engine_label_key(), DEFAULT_ENGINE_LABEL_KEY);
    assert_eq!(
        set.engine_names().collect::<Vec<_>>(),
        vec!["llamacpp", "sglang", "triton-tensorrt-llm", "trtllm-serve", "vllm"]
    );
    let vllm = set.get("vllm").unwrap();
    assert_eq!(spec_text(&vllm.queued).as_deref(), Some("vllm:num_requests_waiting"));
    assert_eq!(spec_text(&vllm.running).as_deref(), Some("vllm:num_requests_running"));
    assert_eq!(spec_text(&vllm.kv_usage).as_deref(), Some("vllm:kv_cache_usage_perc"));
    assert_eq!(spec_text(&vllm.kv_usage_fallback).as_deref(), Some("vllm:gpu_cache_usage_perc"));
    assert_eq!(spec_text(&vllm.lora).as_deref(), Some("vllm:lora_requests_info"));
    assert_eq!(spec_text(&vllm.cache_info).as_deref(), Some("vllm:cache_config_info"));
    assert_eq!(
        (vllm.cache_block_size_label.as_str(), vllm.cache_num_blocks_label.as_str()),
        ("block_size", "num_gpu_blocks")
    );
    assert_eq!(vllm.aggregation, SeriesAggregation::SumMax);

    let sglang = set.get("sglang").unwrap();
    assert_eq!(spec_text(&sglang.kv_usage).as_deref(), Some("sglang:token_usage"));
    assert_eq!(sglang.lora, None);
    assert_eq!(
        (sglang.cache_block_size_label.as_str(), sglang.cache_num_blocks_label.as_str()),
        ("page_size", "num_pages")
    );
    assert_eq!(sglang.aggregation, SeriesAggregation::First);

    let trt = set.get("trtllm-serve").unwrap();
    assert_eq!(spec_text(&trt.cache_block_size).as_deref(), Some("trtllm_kv_cache_tokens_per_block"));
    assert_eq!(spec_text(&trt.cache_num_blocks).as_deref(), Some("trtllm_kv_cache_max_blocks"));
    assert_eq!(trt.cache_info, None);

    let triton = set.get("triton-tensorrt-llm").unwrap();
    assert_eq!(
        spec_text(&triton.queued).as_deref(),
        Some("nv_trt_llm_request_metrics{request_type=\"waiting\"}")
    );
    assert_eq!(
        spec_text(&triton.kv_usage).as_deref(),
        Some("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"}")
    );
    assert_eq!(triton.wanted_names(), ["nv_trt_llm_kv_cache_block_metrics", "nv_trt_llm_request_metrics"]);
}

#[test]
fn engine_is_chosen_by_label_with_default_fallback() {
    let set = EngineSet::builtin();
    let labels = |v: &str| BTreeMap::from([(DEFAULT_ENGINE_LABEL_KEY.to_string(), v.to_string())]);
    assert_eq!(set.for_labels(&labels("sglang")).name, "sglang");
    assert_eq!(set.for_labels(&labels("unknown")).name, "vllm");
    assert_eq!(set.for_labels(&labels("")).name, "vllm");
    assert_eq!(set.for_labels(&labels("default")).name, "vllm");
    assert_eq!(set.for_labels(&BTreeMap::new()).name, "vllm");
}

#[test]
fn user_entry_replaces_the_builtin_entirely() {
    let set = EngineSet::from_params(&params(serde_json::json!({
        "engineLabelKey": "engine",
        "defaultEngine": "sglang",
        "engineConfigs": [
            {"name": "vllm", "queuedRequestsSpec": "vllm:num_requests_waiting{engine=\"0\"}",
             "runningRequestsSpec": "vllm:num_requests_running", "kvUsageSpec": "vllm:kv_cache_usage_perc",
             "loraSpec": ""},
            {"name": "custom", "queuedRequestsSpec": "q", "seriesAggregation": "sumMax"}
        ]
    })))
    .unwrap();
    assert_eq!(set.engine_label_key(), "engine");
    assert_eq!(set.default_engine().name, "sglang");
    let vllm = set.get("vllm").unwrap();
    assert_eq!(vllm.queued.as_ref().unwrap().matchers(), [("engine".to_string(), "0".to_string())]);
    assert_eq!(vllm.lora, None, "\"\" disables");
    assert_eq!(vllm.cache_info, None, "absent fields are not merged from the built-in");
    assert_eq!(vllm.aggregation, SeriesAggregation::SumMax);
    let custom = set.get("custom").unwrap();
    assert_eq!(custom.running, None);
    assert_eq!(custom.aggregation, SeriesAggregation::SumMax);
    assert!(set.get("trtllm-serve").is_some(), "other built-ins remain");
}

#[test]
fn legacy_kv_name_prefers_the_current_one() {
    let set = EngineSet::from_params(&params(serde_json::json!({
        "engineConfigs": [{"name": "vllm", "kvUsageSpec": "vllm:gpu_cache_usage_perc{model_name=m}"}]
    })))
    .unwrap();
    let vllm = set.get("vllm").unwrap();
    assert_eq!(spec_text(&vllm.kv_usage).as_deref(), Some("vllm:kv_cache_usage_perc{model_name=\"m\"}"));
    assert_eq!(
        spec_text(&vllm.kv_usage_fallback).as_deref(),
        Some("vllm:gpu_cache_usage_perc{model_name=\"m\"}")
    );
}

#[test]
fn errors_name_the_field() {
    let err = |json: serde_json::Value| EngineSet::from_params(&params(json)).unwrap_err().to_string();
    let e = err(serde_json::json!({"engineConfigs": [{"name": "x", "kvUsageSpec": "a{b!=\"c\"}"}]}));
    assert!(e.starts_with("engineConfigs[0].kvUsageSpec: "), "{e}");
    let e =
        err(serde_json::json!({"engineConfigs": [{"name": "x"}, {"name": "y", "cacheNumBlocksSpec": "1x"}]}));
    assert!(e.starts_with("engineConfigs[1].cacheNumBlocksSpec: "), "{e}");
    let e = err(serde_json::json!({"engineConfigs": [{"name": ""}]}));
    assert!(e.contains("engineConfigs[0].name") && e.contains("empty"), "{e}");
    let e = err(serde_json::json!({"engineConfigs": [{"name": "default"}]}));
    assert!(e.contains("reserved"), "{e}");
    let e = err(serde_json::json!({"engineConfigs": [{"name": "a"}, {"name": "a"}]}));
    assert!(e.contains("engineConfigs[1].name") && e.contains("twice"), "{e}");
    let e = err(serde_json::json!({"defaultEngine": "nope"}));
    assert!(e.starts_with("defaultEngine: "), "{e}");
}

#[test]
fn params_are_decoded_strictly_with_defaults() {
    let p = params(serde_json::json!({}));
    assert_eq!(p, ExtractorParams::default());
    assert_eq!(p.engine_label_key, DEFAULT_ENGINE_LABEL_KEY);
    assert_eq!(p.default_engine, "vllm");
    assert!(serde_json::from_value::<ExtractorParams>(serde_json::json!({"engineLabelKe": "x"})).is_err());
    let bad_entry = serde_json::json!({"engineConfigs": [{"name": "x", "kvUsage": "y"}]});
    assert!(serde_json::from_value::<ExtractorParams>(bad_entry).is_err());
    let no_name = serde_json::json!({"engineConfigs": [{"kvUsageSpec": "y"}]});
    assert!(serde_json::from_value::<ExtractorParams>(no_name).is_err());
    // Go treats empty strings as "use the default".
    let set = EngineSet::from_params(&params(serde_json::json!({"engineLabelKey": "", "defaultEngine": ""})));
    assert_eq!(set.unwrap().engine_label_key(), DEFAULT_ENGINE_LABEL_KEY);
}

#[test]
fn data_source_params() {
    let d: DataSourceParams = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(d, DataSourceParams::default());
    assert!(d.insecure_skip_verify);
    assert_eq!(d.metrics_url("10.0.0.1:8000"), "http://10.0.0.1:8000/metrics");
    let d: DataSourceParams = serde_json::from_value(
        serde_json::json!({"scheme": "https", "path": "stats", "insecureSkipVerify": false}),
    )
    .unwrap();
    assert_eq!(d.metrics_url("[fd00::1]:8000"), "https://[fd00::1]:8000/stats");
    assert!(!d.insecure_skip_verify);
    assert!(serde_json::from_value::<DataSourceParams>(serde_json::json!({"scheme": "ftp"})).is_err());
    assert!(serde_json::from_value::<DataSourceParams>(serde_json::json!({"port": 1})).is_err());
}
