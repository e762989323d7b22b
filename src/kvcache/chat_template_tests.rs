//! Expected texts are what transformers 5.19's `_compile_jinja_template(template).render(...)` gives for
//! the same templates and contexts (run once from `.venv-vllm`); `make test-vllm` checks a real model's
//! template against vLLM's own tokens.

use super::*;

/// A ChatML template written like the Hub's: block tags on their own lines (trim_blocks and lstrip_blocks
/// decide the output), a Python string method, `loop` and the special tokens.
const CHATML: &str = "{{ bos_token }}
{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
<|im_start|>system
You are helpful.<|im_end|>
    {% endif %}
<|im_start|>{{ message['role'] }}{% if message.name %} ({{ message.name }}){% endif %}

{{ message['content'] | trim }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}";

/// A template that iterates over each message's content parts ("openai" content format).
const PARTS: &str = "{% for message in messages %}[{{ message.role }}]\
{% for part in message['content'] %}{% if part.type == 'text' %}<{{ part.text }}>{% endif %}{% endfor %}\
{% endfor %}";

fn chatml() -> ChatTemplate {
    let tokens = vec![("bos_token", "<s>".to_owned()), ("eos_token", "</s>".to_owned())];
    ChatTemplate::new(CHATML.into(), tokens, None).expect("compiles")
}

fn render(template: &ChatTemplate, body: serde_json::Value) -> ChatPrompt {
    template.render(body.to_string().as_bytes()).expect("renders")
}

fn text(prompt: ChatPrompt) -> String {
    match prompt {
        ChatPrompt::Text(text) => text,
        other => panic!("expected a rendered prompt, got {other:?}"),
    }
}

#[test]
fn chatml_renders_as_transformers_does() {
    let body = serde_json::json!({"model": "m", "messages": [
        {"role": "user", "content": "  Hi there \n", "name": "ann"},
        {"role": "assistant", "content": null},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": ""}, "two"]},
    ], "max_tokens": 3});
    assert_eq!(
        text(render(&chatml(), body.clone())),
        "<s>\n<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user (ann)\nHi there<|im_end|>\n\
         <|im_start|>assistant\n<|im_end|>\n<|im_start|>user\none\ntwo<|im_end|>\n<|im_start|>assistant\n"
    );
    let mut without = body;
    without["add_generation_prompt"] = serde_json::json!(false);
    assert!(text(render(&chatml(), without)).ends_with("one\ntwo<|im_end|>\n"));
}

#[test]
fn content_parts_reach_a_template_that_iterates_them_as_dicts() {
    let template = ChatTemplate::new(PARTS.into(), Vec::new(), None).expect("compiles");
    assert_eq!(template.format(), ContentFormat::OpenAi);
    let body = serde_json::json!({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]},
    ]});
    assert_eq!(text(render(&template, body)), "[system]<be brief>[user]<a><>");
}

#[test]
fn content_format_is_detected_from_the_loops() {
    assert_eq!(ContentFormat::detect(CHATML), ContentFormat::String);
    assert_eq!(ContentFormat::detect(PARTS), ContentFormat::OpenAi);
    assert_eq!(
        ContentFormat::detect("{%- for c in m.content -%}{{ c }}{%- endfor %}"),
        ContentFormat::OpenAi
    );
    assert_eq!(
        ContentFormat::detect("{% for item in content if item.type == 'text' %}{% endfor %}"),
        ContentFormat::OpenAi
    );
    assert_eq!(
        ContentFormat::detect("{% for m in messages %}{{ m['content'] }}{% endfor %}"),
        ContentFormat::String
    );
}

#[test]
fn what_only_the_engine_renders_exactly_goes_to_render() {
    let user = serde_json::json!({"role": "user", "content": "hi"});
    let cases = [
        (serde_json::json!({"messages": [user], "tools": [{"type": "function"}]}), "tools"),
        (
            serde_json::json!({"messages": [user], "chat_template_kwargs": {"enable_thinking": true}}),
            "chat_template_kwargs",
        ),
        (serde_json::json!({"messages": [user], "continue_final_message": true}), "continue_final_message"),
        (serde_json::json!({"messages": [user], "add_special_tokens": true}), "add_special_tokens"),
        (
            serde_json::json!({"messages": [{"role": "developer", "content": "x"}]}),
            "the developer or tool role",
        ),
        (serde_json::json!({"messages": [{"role": "assistant", "tool_calls": []}]}), "tool_calls"),
        (
            serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
            "a non-text content part",
        ),
        (
            serde_json::json!({"messages": [{"role": "system", "content": "x-anthropic-billing-header: 1\nhi"}]}),
            "a billing header in a system prompt",
        ),
    ];
    for (body, reason) in cases {
        assert_eq!(render(&chatml(), body.clone()), ChatPrompt::NeedsRender(reason), "{body}");
    }
    let nulls = serde_json::json!({"messages": [user], "tools": null, "documents": null, "add_special_tokens": false});
    assert!(matches!(render(&chatml(), nulls), ChatPrompt::Text(_)), "null and default values render here");
}

#[test]
fn bad_bodies_and_template_exceptions_are_errors() {
    for body in
        [&b"not json"[..], br#"{"messages": "hi"}"#, br#"{"messages": [], "add_generation_prompt": "yes"}"#]
    {
        assert!(chatml().render(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
    let strict = "{% if messages[0]['role'] == 'assistant' %}{{ raise_exception('Conversation must start with the user') }}{% endif %}ok";
    let strict = ChatTemplate::new(strict.into(), Vec::new(), None).expect("compiles");
    let error =
        strict.render(br#"{"messages": [{"role": "assistant", "content": "x"}]}"#).expect_err("raises");
    assert!(error.to_string().contains("Conversation must start with the user"), "{error}");
    assert!(ChatTemplate::new("{% for %}".into(), Vec::new(), None).is_err(), "a syntax error");
}

#[test]
fn tojson_is_pythons_json_dumps() {
    let cases = [
        (
            "{{ {'a': 'é\"', 'b': [1, 2.5, none, true]} | tojson }}",
            r#"{"a": "é\"", "b": [1, 2.5, null, true]}"#,
        ),
        ("{{ {'b': 1, 'a': []} | tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": []\n}"),
        ("{{ {'b': 1, 'a': {}} | tojson(sort_keys=true, separators=[',', ':']) }}", r#"{"a":{},"b":1}"#),
        ("{{ ['é', '🍜', '<&>'] | tojson(ensure_ascii=true) }}", r#"["\u00e9", "\ud83c\udf5c", "<&>"]"#),
    ];
    for (source, expected) in cases {
        let template = ChatTemplate::new(source.into(), Vec::new(), None).expect("compiles");
        assert_eq!(text(template.render(br#"{"messages": []}"#).expect("renders")), expected, "{source}");
    }
}

#[test]
fn strftime_now_formats_the_local_time() {
    let template = ChatTemplate::new("{{ strftime_now('%Y') }}".into(), Vec::new(), None).expect("compiles");
    let year = text(template.render(br#"{"messages": []}"#).expect("renders"));
    assert_eq!(year, jiff::Zoned::now().year().to_string());
}

#[test]
fn a_tokenizer_config_loads_with_its_special_tokens_and_bad_ones_name_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tokenizer_config.json");
    let write = |path: &std::path::Path, text: &str| std::fs::write(path, text).expect("write");
    write(
        &config,
        r#"{"bos_token": {"__type": "AddedToken", "content": "<B>"}, "chat_template": [
            {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}{{ eos_token }}"}]}"#,
    );
    write(&dir.path().join("special_tokens_map.json"), r#"{"bos_token": "<ignored>", "eos_token": "<E>"}"#);
    let loaded = ChatTemplate::load(&config, None).expect("loads");
    assert_eq!(text(loaded.render(br#"{"messages": []}"#).expect("renders")), "<B><E>");

    write(&config, r#"{"eos_token": "</s>"}"#);
    write(&dir.path().join("chat_template.jinja"), "{{ messages | length }}{{ eos_token }}");
    let beside =
        ChatTemplate::load(&config, Some(ContentFormat::OpenAi)).expect("loads the .jinja beside it");
    assert_eq!(beside.format(), ContentFormat::OpenAi);
    assert_eq!(
        text(beside.render(br#"{"messages": [{"role": "user", "content": "x"}]}"#).expect("renders")),
        "1</s>"
    );

    std::fs::remove_file(dir.path().join("chat_template.jinja")).expect("remove");
    for bad in
        [r#"{"eos_token": "</s>"}"#, r#"{"chat_template": 3}"#, r#"{"chat_template": "{% if %}"}"#, "[1]"]
    {
        write(&config, bad);
        let error = ChatTemplate::load(&config, None).expect_err(bad);
        assert!(error.to_string().contains("tokenizer_config.json"), "{bad}: {error}");
    }
}
