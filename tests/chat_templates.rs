//! `--chat` prompts tokenize to the ids llama.cpp evaluates: `locus tokenize --chat` against
//! llama-completion's `--verbose-prompt` for Gemma 3 with `--chat-template gemma` (its file has
//! no template) and for SmolLM2's own ChatML template with its default system message (as
//! llama.cpp's Jinja path renders it) or without it (`--chat-template chatml`, llama.cpp's
//! built-in). Also: the errors for a missing or unknown template, and the help's list.

mod common;

use locus::model::chat::ChatFormat;

/// One golden case: `model \t template \t system \t user \t ids` (`-` for no system message;
/// template `model` = the model's own template, no `--chat-template`).
struct Case {
    model: String,
    template: String,
    system: Option<String>,
    user: String,
    ids: String,
}

fn cases() -> Vec<Case> {
    let text = common::skip::golden_file("chat_prompt_ids.txt");
    let cases: Vec<Case> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "bad golden line: {l:?}");
            let ids: Vec<&str> = f[4].split_whitespace().collect();
            Case {
                model: f[0].to_string(),
                template: f[1].to_string(),
                system: (f[2] != "-").then(|| unescape(f[2])),
                user: unescape(f[3]),
                ids: format!("[{}]\n", ids.join(", ")),
            }
        })
        .collect();
    assert!(!cases.is_empty(), "no cases in chat_prompt_ids.txt");
    cases
}

/// The golden file writes a newline in a message as `\n` (and a backslash as `\\`).
fn unescape(s: &str) -> String {
    s.replace("\\n", "\n").replace("\\\\", "\\")
}

fn check_model(name: &str) {
    let Some(m) = common::model_path(name) else {
        return;
    };
    let mine: Vec<Case> = cases().into_iter().filter(|c| c.model == name).collect();
    assert!(!mine.is_empty(), "no golden cases for {name}");
    for c in mine {
        let mut args = vec!["tokenize", "-m", m.to_str().unwrap(), "--ids", "--chat"];
        if c.template != "model" {
            args.extend(["--chat-template", &c.template]);
        }
        if let Some(s) = &c.system {
            args.extend(["--system", s]);
        }
        args.extend(["-p", &c.user]);
        let out = common::locus(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), c.ids, "{args:?}");
    }
}

#[test]
fn gemma_template_ids_match_llama_cpp() {
    check_model("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn chatml_template_ids_match_llama_cpp() {
    check_model("SmolLM2-135M-Instruct.Q8_0.gguf");
}

#[test]
fn a_model_without_a_template_needs_chat_template() {
    let Some(m) = common::model_path("gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let ms = m.to_str().unwrap();
    for args in [
        vec!["tokenize", "-m", ms, "--chat", "-p", "hi"],
        vec!["run", "-m", ms, "--chat", "-p", "hi", "-n", "1"],
        // Refused before the weights are placed: `-v` would print the placement first.
        vec!["run", "-m", ms, "--chat", "-p", "hi", "-n", "1", "-v"],
    ] {
        let e = common::one_error_line(&common::locus(&args), "no template");
        assert!(
            e.contains("no chat template") && e.contains("--chat-template"),
            "{e}"
        );
        for name in ChatFormat::NAMES {
            assert!(e.contains(name), "{e} lacks {name}");
        }
    }
}

#[test]
fn an_unknown_template_name_is_a_usage_error() {
    // Refused while the arguments are read: no model is opened.
    for cmd in ["run", "tokenize"] {
        let out = common::locus(&[
            cmd,
            "-m",
            "/nonexistent.gguf",
            "--chat-template",
            "Gemma",
            "-p",
            "x",
        ]);
        let e = common::one_error_line(&out, "unknown template");
        assert!(
            e.contains("--chat-template") && e.contains("'Gemma'"),
            "{e}"
        );
        for name in ChatFormat::NAMES {
            assert!(e.contains(name), "{e} lacks {name}");
        }
    }
}

#[test]
fn help_lists_every_template() {
    let out = common::locus(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .collect();
    for name in ChatFormat::NAMES {
        assert!(words.contains(&name), "run --help lacks {name}");
    }
    assert!(help.contains("--chat-template NAME") && help.contains("--system TEXT"));
}

/// The prompt text of llama.cpp's built-in templates (`gen_chat_text.py`, calling
/// `llama_chat_apply_template`), for each format by name and for the model families' own
/// template texts in tests/data/chat_templates/, which llama.cpp recognises first: locus must
/// recognise each text as llama.cpp does and write the same prompt, whole conversations
/// included.
#[test]
fn builtin_templates_write_llama_cpp_text() {
    check_golden_text("chat_builtin_text.jsonl", "tests/data/chat_templates");
}

/// Gemma 4's own template (llama.cpp has no built-in for it), as `gen_chat_jinja.py` renders
/// it with jinja2: locus recognises it as `gemma4` and writes the same prompt.
#[test]
fn gemma4_template_writes_its_jinja_text() {
    check_golden_text("chat_jinja_text.jsonl", "tests/data/chat_templates_jinja");
}

/// Each golden line's conversation, rendered by locus for its source (a format name or a
/// template file of `templates`), equals the line's text; every file has lines.
fn check_golden_text(golden_name: &str, templates: &str) {
    use locus::json::Json;
    use locus::model::chat::{ChatTemplate, Role};
    let golden = common::skip::golden_file(golden_name);
    let dir = common::repo_path(templates);
    let mut seen_files = std::collections::BTreeSet::new();
    let mut n = 0;
    for line in golden.lines().filter(|l| !l.is_empty()) {
        let j = Json::parse(line).expect("golden line is JSON");
        let field = |k: &str| j.get(k).unwrap_or_else(|| panic!("{line}: no {k}"));
        let source = field("source").as_str().expect("source is a string");
        let want = field("text").as_str().expect("text is a string");
        let messages: Vec<(Role, String)> = field("messages")
            .as_array()
            .expect("messages is an array")
            .iter()
            .map(|m| {
                let pair = m.as_array().expect("a message is [role, content]");
                let role = match pair[0].as_str() {
                    Some("system") => Role::System,
                    Some("developer") => Role::Developer,
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    other => panic!("unknown role {other:?}"),
                };
                (role, pair[1].as_str().expect("content").to_string())
            })
            .collect();
        let template = match source.strip_prefix("file:") {
            Some(file) => {
                seen_files.insert(file.to_string());
                let text = std::fs::read_to_string(dir.join(file)).expect("template file");
                ChatTemplate::choose(None, Some(&text))
            }
            None => ChatTemplate::choose(
                Some(ChatFormat::from_name(source).expect("a format name locus knows")),
                None,
            ),
        }
        .unwrap_or_else(|e| panic!("{source}: {e}"));
        let msgs: Vec<(Role, &str)> = messages.iter().map(|(r, c)| (*r, c.as_str())).collect();
        let got = template
            .render_messages(&msgs)
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(
            got, want,
            "{source} ({:?}), messages {msgs:?}",
            template.format
        );
        n += 1;
    }
    let files: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("template directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(seen_files, files, "every template file has golden text");
    assert!(n >= files.len(), "only {n} golden prompts");
}
