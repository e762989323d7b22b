//! Chat request bodies rendered by `token-producer`'s in-process chat template: the body is a client's,
//! the template the operator's, and a body that breaks the template must be an error (the request then
//! goes to the engine's render endpoint), never a panic.
//!
//! Input: a first byte choosing one of the templates below, then the body. Invariant beyond "no panic":
//! a body the echoing template renders yields every message's string content, in order.

use epp::kvcache::{ChatPrompt, ChatTemplate};

/// Each message's role and content, in order: what the invariant reads back.
const ECHO: &str = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";

/// The shapes the Hub's templates take: trimmed blocks, a loop over content parts, Python string methods,
/// `tojson`, namespaces, `raise_exception`, the generation prompt and special tokens.
const TEMPLATES: [&str; 3] = [
    "{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'system' and not loop.first %}{{ raise_exception('system first') }}{% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] | trim }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}",
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% for part in m['content'] %}\
{% if part.type == 'text' %}{% set ns.n = ns.n + 1 %}[{{ part.text.strip().upper() }}]{% endif %}\
{% endfor %}{% endfor %}{{ ns.n }}",
    "{{ messages | tojson(indent=2) }}{{ messages[-1]['content'].split(' ') | tojson }}\
{% if messages[0].name is defined %}{{ messages[0].name.startswith('a') }}{% endif %}",
];

pub fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let tokens = vec![("bos_token", "<s>".to_owned()), ("eos_token", "</s>".to_owned())];
    if usize::from(selector) >= TEMPLATES.len() {
        echo_holds_every_content(body);
        return;
    }
    let source = TEMPLATES[usize::from(selector)].to_owned();
    if let Ok(template) = ChatTemplate::new(source, tokens, None) {
        let _ = template.render(body);
    }
}

fn echo_holds_every_content(body: &[u8]) {
    let Ok(template) = ChatTemplate::new(ECHO.to_owned(), Vec::new(), None) else { return };
    let Ok(ChatPrompt::Text(text)) = template.render(body) else { return };
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else { return };
    let mut rest = text.as_str();
    for message in request["messages"].as_array().into_iter().flatten() {
        if let Some(content) = message["content"].as_str() {
            let at = rest.find(content);
            assert!(at.is_some(), "the rendered chat lost {content:?}: {text:?}");
            rest = &rest[at.unwrap_or(0) + content.len()..];
        }
    }
}
