//! Chat templates. Jinja is not interpreted: the template text in `tokenizer.chat_template` is
//! recognised by its markers, in the order llama.cpp's `llm_chat_detect_template` tests them,
//! and the prompt is written by hand exactly as llama.cpp's built-in template of that name
//! writes it (`llm_chat_apply_template`) for one optional system message and one user message,
//! with the assistant's turn opened (longer conversations for the formats that write each turn
//! alike). Where a model's own template opens a reasoning block (DeepSeek-R1's `<think>\n`),
//! the built-in template does not, and neither does locus.
//!
//! One addition to llama.cpp's built-in templates: many ChatML templates (Qwen2, Qwen2.5,
//! SmolLM2) render a default system message when the conversation has none, which llama.cpp's
//! built-in `chatml` leaves out (its Jinja path keeps it). Where the model's own template
//! carries such a default, [`ChatTemplate::choose`] reads it from the template text and uses it
//! when no system message is given, so the prompt is the one the model's template renders. A
//! format named on the command line is llama.cpp's built-in template as it is (`qwen` is ChatML
//! with Qwen2.5's default); `--chat-template chatml` is the way to drop a model's default.

use std::fmt;

/// A chat format: one of llama.cpp's built-in templates, or `qwen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\ncontent<|im_end|>\n` (SmolLM2, Qwen, many others).
    ChatMl,
    /// ChatML whose system message defaults to Qwen2.5's ([`QWEN_DEFAULT_SYSTEM`]).
    Qwen,
    /// `[INST] system\nuser [/INST]` (Llama 2 templates without `<<SYS>>`).
    Llama2,
    /// `[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST]` (Llama 2 chat).
    Llama2Sys,
    /// As [`ChatFormat::Llama2Sys`] for a first turn (later turns start with `<s>`).
    Llama2SysBos,
    /// As [`ChatFormat::Llama2Sys`], each message trimmed of ASCII white space.
    Llama2SysStrip,
    /// ` [INST] system\n\nuser [/INST]` (Mistral's v1 template).
    MistralV1,
    /// `[INST] system\n\nuser[/INST]` (Mistral's v3 template).
    MistralV3,
    /// `[INST]system\n\nuser[/INST]` (Mistral's v3 Tekken template).
    MistralV3Tekken,
    /// `[SYSTEM_PROMPT] system[/SYSTEM_PROMPT][INST] user[/INST]` (Mistral's v7 template).
    MistralV7,
    /// `[SYSTEM_PROMPT]system[/SYSTEM_PROMPT][INST]user[/INST]` (Mistral's v7 Tekken template).
    MistralV7Tekken,
    /// `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>` (Llama 3).
    Llama3,
    /// `<start_of_turn>user\ncontent<end_of_turn>\n`, the system message merged into the first
    /// user turn (Gemma has no system role).
    Gemma,
    /// `system\n\nUser: content\n\nAssistant: content<｜end▁of▁sentence｜>` (DeepSeek-V2).
    DeepSeek2,
    /// `system\n\n<｜User｜>content<｜Assistant｜>content<｜end▁of▁sentence｜>` (DeepSeek-V3,
    /// R1, V3.1; the built-in writes no `<think>`).
    DeepSeek3,
    /// `[gMASK]<sop><|role|>\ncontent` (GLM-4, GLM-4.5 and later; no `<think>` written).
    ChatGlm4,
    /// `<|im_user|>user<|im_middle|>content<|im_end|>` (Kimi-K2).
    KimiK2,
    /// `<|start|>role<|message|>content<|end|>`, the assistant's turn opened as
    /// `<|start|>assistant` (gpt-oss's harmony format, llama.cpp's `gpt-oss`): system and
    /// developer messages are turns of their own, an assistant's ends with `<|return|>`.
    GptOss,
    /// `<|turn>role\ncontent<turn|>\n`, the model's turn opened with an empty thought channel
    /// (Gemma 4's own template; llama.cpp has no built-in for it): see [`ChatFormat::Gemma4`]'s
    /// writer for the rules.
    Gemma4,
}

/// The system message of Qwen2.5's template when the conversation has none.
pub const QWEN_DEFAULT_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

impl ChatFormat {
    /// Every format, in the order [`ChatFormat::NAMES`] lists them.
    pub const ALL: [ChatFormat; 19] = [
        ChatFormat::ChatMl,
        ChatFormat::Qwen,
        ChatFormat::Llama2,
        ChatFormat::Llama2Sys,
        ChatFormat::Llama2SysBos,
        ChatFormat::Llama2SysStrip,
        ChatFormat::MistralV1,
        ChatFormat::MistralV3,
        ChatFormat::MistralV3Tekken,
        ChatFormat::MistralV7,
        ChatFormat::MistralV7Tekken,
        ChatFormat::Llama3,
        ChatFormat::Gemma,
        ChatFormat::DeepSeek2,
        ChatFormat::DeepSeek3,
        ChatFormat::ChatGlm4,
        ChatFormat::KimiK2,
        ChatFormat::GptOss,
        ChatFormat::Gemma4,
    ];

    /// The names `--chat-template` accepts (llama.cpp's names, `qwen` and `gemma4`).
    pub const NAMES: [&'static str; ChatFormat::ALL.len()] = {
        let mut names = [""; ChatFormat::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = ChatFormat::ALL[i].name();
            i += 1;
        }
        names
    };

    pub const fn name(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "chatml",
            ChatFormat::Qwen => "qwen",
            ChatFormat::Llama2 => "llama2",
            ChatFormat::Llama2Sys => "llama2-sys",
            ChatFormat::Llama2SysBos => "llama2-sys-bos",
            ChatFormat::Llama2SysStrip => "llama2-sys-strip",
            ChatFormat::MistralV1 => "mistral-v1",
            ChatFormat::MistralV3 => "mistral-v3",
            ChatFormat::MistralV3Tekken => "mistral-v3-tekken",
            ChatFormat::MistralV7 => "mistral-v7",
            ChatFormat::MistralV7Tekken => "mistral-v7-tekken",
            ChatFormat::Llama3 => "llama3",
            ChatFormat::Gemma => "gemma",
            ChatFormat::DeepSeek2 => "deepseek2",
            ChatFormat::DeepSeek3 => "deepseek3",
            ChatFormat::ChatGlm4 => "chatglm4",
            ChatFormat::KimiK2 => "kimi-k2",
            ChatFormat::GptOss => "gpt-oss",
            ChatFormat::Gemma4 => "gemma4",
        }
    }

    /// The format of a name in [`ChatFormat::NAMES`] (exact, as llama.cpp matches names).
    pub fn from_name(name: &str) -> Option<ChatFormat> {
        ChatFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Recognises a template; `None` when it matches no format locus renders.
    pub fn detect(template: &str) -> Option<ChatFormat> {
        classify(template).and_then(Result::ok)
    }

    /// The prompt text for an optional system message and one user message, with the
    /// assistant's turn opened, as llama.cpp's built-in template of this name writes it. BOS is
    /// not included (the tokenizer adds it if the model wants). An empty system message is no
    /// system message (llama-completion's `-sys ""`).
    pub fn render(self, system: Option<&str>, user: &str) -> String {
        let system = system.filter(|s| !s.is_empty());
        match self {
            ChatFormat::ChatMl => {
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                }
                s.push_str(&format!(
                    "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
                ));
                s
            }
            ChatFormat::Qwen => {
                ChatFormat::ChatMl.render(Some(system.unwrap_or(QWEN_DEFAULT_SYSTEM)), user)
            }
            ChatFormat::Llama2
            | ChatFormat::Llama2Sys
            | ChatFormat::Llama2SysBos
            | ChatFormat::Llama2SysStrip => {
                let strip = self == ChatFormat::Llama2SysStrip;
                let text = |m: &str| {
                    if strip {
                        c_trim(m).to_string()
                    } else {
                        m.to_string()
                    }
                };
                // The first turn opens with `[INST] ` (its BOS is the tokenizer's).
                let mut s = String::from("[INST] ");
                if let Some(sys) = system {
                    if self == ChatFormat::Llama2 {
                        // No system role: the message leads the first user turn.
                        s.push_str(&format!("{}\n", text(sys)));
                    } else {
                        s.push_str(&format!("<<SYS>>\n{}\n<</SYS>>\n\n", text(sys)));
                    }
                }
                s.push_str(&format!("{} [/INST]", text(user)));
                s
            }
            ChatFormat::MistralV1 | ChatFormat::MistralV3 | ChatFormat::MistralV3Tekken => {
                let lead = if self == ChatFormat::MistralV1 {
                    " "
                } else {
                    ""
                };
                let trail = if self == ChatFormat::MistralV3Tekken {
                    ""
                } else {
                    " "
                };
                let mut s = format!("{lead}[INST]{trail}");
                if let Some(sys) = system {
                    s.push_str(&format!("{sys}\n\n"));
                }
                s.push_str(&format!("{user}{lead}[/INST]"));
                s
            }
            ChatFormat::MistralV7 | ChatFormat::MistralV7Tekken => {
                let sp = if self == ChatFormat::MistralV7 {
                    " "
                } else {
                    ""
                };
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(&format!("[SYSTEM_PROMPT]{sp}{sys}[/SYSTEM_PROMPT]"));
                }
                s.push_str(&format!("[INST]{sp}{user}[/INST]"));
                s
            }
            ChatFormat::Llama3 => {
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(&format!(
                        "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
                        c_trim(sys)
                    ));
                }
                s.push_str(&format!(
                    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>\
                     <|start_header_id|>assistant<|end_header_id|>\n\n",
                    c_trim(user)
                ));
                s
            }
            ChatFormat::Gemma => {
                let mut s = String::from("<start_of_turn>user\n");
                // Merged only when something is left after trimming.
                if let Some(sys) = system.map(c_trim).filter(|s| !s.is_empty()) {
                    s.push_str(&format!("{sys}\n\n"));
                }
                s.push_str(&format!(
                    "{}<end_of_turn>\n<start_of_turn>model\n",
                    c_trim(user)
                ));
                s
            }
            ChatFormat::Gemma4 => {
                let mut turns = Vec::with_capacity(2);
                turns.extend(system.map(|s| (Role::System, s)));
                turns.push((Role::User, user));
                gemma4(&turns)
            }
            ChatFormat::DeepSeek2
            | ChatFormat::DeepSeek3
            | ChatFormat::ChatGlm4
            | ChatFormat::KimiK2
            | ChatFormat::GptOss => {
                let mut turns = Vec::with_capacity(2);
                turns.extend(system.map(|s| (Role::System, s)));
                turns.push((Role::User, user));
                // Every format of this arm has a turn writer.
                self.turn_writer()
                    .map(|w| w.write(&turns))
                    .unwrap_or_default()
            }
        }
    }

    /// The formats whose built-in template writes each message alone, whatever its place:
    /// every message (system, user, assistant) as llama.cpp's loop writes it, then the opening
    /// of the assistant's turn. `None` for the other formats.
    fn turn_writer(self) -> Option<TurnWriter> {
        const DEEPSEEK_EOS: &str = "<｜end▁of▁sentence｜>";
        Some(match self {
            ChatFormat::DeepSeek2 => TurnWriter {
                start: "",
                system: ("", "\n\n"),
                user: ("User: ", "\n\n"),
                assistant: ("Assistant: ", DEEPSEEK_EOS),
                open: "Assistant:",
            },
            ChatFormat::DeepSeek3 => TurnWriter {
                start: "",
                system: ("", "\n\n"),
                user: ("<｜User｜>", ""),
                assistant: ("<｜Assistant｜>", DEEPSEEK_EOS),
                open: "<｜Assistant｜>",
            },
            ChatFormat::ChatGlm4 => TurnWriter {
                start: "[gMASK]<sop>",
                system: ("<|system|>\n", ""),
                user: ("<|user|>\n", ""),
                assistant: ("<|assistant|>\n", ""),
                open: "<|assistant|>\n",
            },
            ChatFormat::KimiK2 => TurnWriter {
                start: "",
                system: ("<|im_system|>system<|im_middle|>", "<|im_end|>"),
                user: ("<|im_user|>user<|im_middle|>", "<|im_end|>"),
                assistant: ("<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"),
                open: "<|im_assistant|>assistant<|im_middle|>",
            },
            ChatFormat::GptOss => TurnWriter {
                start: "",
                system: ("<|start|>system<|message|>", "<|end|>"),
                user: ("<|start|>user<|message|>", "<|end|>"),
                assistant: ("<|start|>assistant<|message|>", "<|return|>"),
                open: "<|start|>assistant",
            },
            _ => return None,
        })
    }
}

/// What a built-in template writes around each message, and at the start and the end.
struct TurnWriter {
    start: &'static str,
    system: (&'static str, &'static str),
    user: (&'static str, &'static str),
    assistant: (&'static str, &'static str),
    /// The assistant's turn, opened.
    open: &'static str,
}

impl TurnWriter {
    /// The prompt for `turns`, contents as they are (not trimmed).
    fn write(&self, turns: &[(Role, &str)]) -> String {
        let mut s = String::from(self.start);
        for &(role, text) in turns {
            let (before, after) = match role {
                Role::System => self.system,
                // Only harmony keeps the developer's role ([`ChatTemplate::render_messages`]).
                Role::Developer => ("<|start|>developer<|message|>", "<|end|>"),
                Role::User => self.user,
                Role::Assistant => self.assistant,
            };
            s.push_str(before);
            s.push_str(text);
            s.push_str(after);
        }
        s.push_str(self.open);
        s
    }
}

/// Gemma 4's template (`google-gemma-4-31B-it.jinja`) for plain text turns, as llama.cpp's
/// Jinja runtime renders it: a first system (or developer) message becomes a `system` turn,
/// every message's text is trimmed (the runtime's `trim` is C's `isspace`), an assistant's
/// (`model`) loses what lies between `<|channel>` and `<channel|>` (its earlier reasoning) before
/// the trim, an assistant message after an assistant continues its turn, and the model's turn
/// opens with an empty thought channel (thinking off). The template's leading `bos_token` is
/// the tokenizer's, as for the other formats.
fn gemma4(turns: &[(Role, &str)]) -> String {
    const OPEN: &str = "<|turn>model\n<|channel>thought\n<channel|>";
    let mut s = String::new();
    let mut rest = turns;
    if let Some(((Role::System | Role::Developer, sys), after)) = turns.split_first() {
        s.push_str(&format!("<|turn>system\n{}<turn|>\n", c_trim(sys)));
        rest = after;
    }
    let mut prev = None;
    for &(role, text) in rest {
        let (name, body) = match role {
            Role::Assistant => ("model", strip_thinking(text)),
            Role::User => ("user", c_trim(text).to_string()),
            Role::System | Role::Developer => ("system", c_trim(text).to_string()),
        };
        if !(role == Role::Assistant && prev == Some(Role::Assistant)) {
            s.push_str(&format!("<|turn>{name}\n"));
        }
        s.push_str(&body);
        s.push_str("<turn|>\n");
        prev = Some(role);
    }
    s.push_str(OPEN);
    s
}

/// Gemma 4's `strip_thinking`: of each part before a `<channel|>`, what precedes its
/// `<|channel>` (or all of it when it has none), joined and trimmed.
fn strip_thinking(text: &str) -> String {
    let mut kept = String::new();
    for part in text.split("<channel|>") {
        kept.push_str(part.split("<|channel>").next().unwrap_or(""));
    }
    c_trim(&kept).to_string()
}

/// Trims what C's `isspace` calls white space (llama.cpp's `trim`): ASCII only, so a
/// no-break space or an ideographic space stays.
fn c_trim(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

/// What a template text is, in llama.cpp's detection order: `Ok` a format locus renders,
/// `Err` the name of a llama.cpp built-in template locus does not render, `None` neither.
/// Only the branches up to Kimi-K2 (the last format locus renders) are followed: a template
/// that passes them all is nothing locus renders, whatever llama.cpp would call it.
fn classify(t: &str) -> Option<Result<ChatFormat, &'static str>> {
    // A template that is a name (llama.cpp tries this first).
    if let Some(f) = ChatFormat::from_name(t).filter(|&f| f != ChatFormat::Qwen) {
        return Some(Ok(f));
    }
    let has = |marker: &str| t.contains(marker);
    let r = if has("<|im_start|>") {
        if has("<|im_sep|>") {
            Err("phi4")
        } else if has("<end_of_utterance>") {
            // SmolVLM uses <|im_start|> as BOS; it is not ChatML.
            Err("smolvlm")
        } else {
            Ok(ChatFormat::ChatMl)
        }
    } else if t.starts_with("mistral") || has("[INST]") {
        Ok(if has("[SYSTEM_PROMPT]") {
            ChatFormat::MistralV7
        } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
            if has(" [INST]") {
                ChatFormat::MistralV1
            } else if has("\"[INST]\"") {
                ChatFormat::MistralV3Tekken
            } else {
                ChatFormat::MistralV3
            }
        } else if has("content.strip()") {
            ChatFormat::Llama2SysStrip
        } else if has("bos_token + '[INST]") {
            ChatFormat::Llama2SysBos
        } else if has("<<SYS>>") {
            ChatFormat::Llama2Sys
        } else {
            ChatFormat::Llama2
        })
    } else if has("<|assistant|>") && has("<|end|>") {
        Err("phi3")
    } else if has("[gMASK]<sop>") {
        Ok(ChatFormat::ChatGlm4)
    } else if has("<|assistant|>") && has("<|user|>") {
        Err(if has("<|tool_declare|>") {
            "exaone-moe"
        } else if has("</s>") {
            "falcon3"
        } else {
            "glmedge"
        })
    } else if has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>") {
        Err("glmedge")
    } else if has("<|user|>") && has("<|endoftext|>") {
        Err("zephyr")
    } else if has("bos_token + message['role']") {
        Err("monarch")
    } else if has("<start_of_turn>") {
        Ok(ChatFormat::Gemma)
    } else if has("'\\n\\nAssistant: ' + eos_token") {
        Err("orion")
    } else if has("GPT4 Correct ") {
        Err("openchat")
    } else if has("USER: ") && has("ASSISTANT: ") {
        Err(if has("SYSTEM: ") {
            "vicuna-orca"
        } else {
            "vicuna"
        })
    } else if has("### Instruction:") && has("<|EOT|>") {
        Err("deepseek")
    } else if has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>") {
        Err("command-r")
    } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
        Ok(ChatFormat::Llama3)
    } else if has("[gMASK]sop") {
        Err("chatglm3")
    } else if has("<用户>") {
        Err("minicpm")
    } else if has("'Assistant: ' + message['content'] + eos_token") {
        Ok(ChatFormat::DeepSeek2)
    } else if has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")
    {
        Ok(ChatFormat::DeepSeek3)
    } else if let Some(late) = classify_late(t) {
        late
    } else if has("<|im_assistant|>assistant<|im_middle|>") {
        Ok(ChatFormat::KimiK2)
    } else if has("<|turn>") && has("<turn|>") {
        // Gemma 4: llama.cpp recognises no built-in template in it (its Jinja path renders it).
        Ok(ChatFormat::Gemma4)
    } else {
        return None;
    };
    Some(r)
}

/// llama.cpp's detection between DeepSeek-V3 and Kimi-K2, in its order: harmony (`gpt-oss`),
/// which locus renders, or the name of a built-in template locus does not render; `None` where
/// none matches.
fn classify_late(t: &str) -> Option<Result<ChatFormat, &'static str>> {
    let has = |marker: &str| t.contains(marker);
    if has("<|start|>") && has("<|channel|>") && classify_before_harmony(t).is_none() {
        return Some(Ok(ChatFormat::GptOss));
    }
    classify_before_harmony(t)
        .or_else(|| classify_after_harmony(t))
        .map(Err)
}

/// The built-in templates llama.cpp tests after DeepSeek-V3 and before harmony.
fn classify_before_harmony(t: &str) -> Option<&'static str> {
    let has = |marker: &str| t.contains(marker);
    Some(
        if has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]") {
            if has("[|tool|]") {
                "exaone4"
            } else {
                "exaone3"
            }
        } else if has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") {
            "rwkv-world"
        } else if has("<|start_of_role|>") {
            if has("<tool_call>") || has("<tools>") {
                if has("g4_default_system_message") {
                    "granite-4.0"
                } else {
                    "granite-4.1"
                }
            } else {
                "granite"
            }
        } else if has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]") {
            "gigachat"
        } else if has("<|role_start|>") {
            "megrez"
        } else if has(" Ассистент:") {
            "yandex"
        } else if has("<role>ASSISTANT</role>") && has("'HUMAN'") {
            "bailing"
        } else if has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>") {
            "bailing-think"
        } else if has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>") {
            "bailing2"
        } else if has("<|header_start|>") && has("<|header_end|>") {
            "llama4"
        } else if has("<|endofuserprompt|>") {
            "dots1"
        } else if has("<|extra_0|>") && has("<|extra_4|>") {
            "hunyuan-moe"
        } else {
            return None;
        },
    )
}

/// The built-in templates llama.cpp tests after harmony and before Kimi-K2.
fn classify_after_harmony(t: &str) -> Option<&'static str> {
    let has = |marker: &str| t.contains(marker);
    Some(
        if has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>") {
            "hunyuan-vl"
        } else if has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>") {
            "hunyuan-dense"
        } else {
            return None;
        },
    )
}

/// The system message a ChatML template writes when the conversation has none: the text of a
/// string literal `'<|im_start|>system\nTEXT<|im_end|>\n'` (either quote; the newlines written
/// as `\n` escapes or as they are). `None` when there is no such literal, or several that
/// disagree.
pub fn default_system(template: &str) -> Option<String> {
    const OPEN: &str = "<|im_start|>system\n";
    const CLOSE: &str = "<|im_end|>\n";
    let mut found: Option<String> = None;
    for quote in ['\'', '"'] {
        let start = format!("{quote}<|im_start|>system");
        let mut from = 0;
        while let Some(at) = template[from..].find(&start) {
            let literal_at = from + at + quote.len_utf8();
            from = literal_at;
            let Some(lit) = string_literal(&template[literal_at..], quote) else {
                continue;
            };
            let Some(text) = lit
                .strip_prefix(OPEN)
                .and_then(|rest| rest.strip_suffix(CLOSE))
            else {
                continue;
            };
            if text.is_empty() || text.contains("<|im_end|>") || text.contains("<|im_start|>") {
                continue;
            }
            match &found {
                Some(f) if f != text => return None,
                _ => found = Some(text.to_string()),
            }
        }
    }
    found
}

/// The value of a Jinja string literal whose opening `quote` was just passed: escapes resolved,
/// up to the closing quote. `None` when the literal does not close.
fn string_literal(s: &str, quote: char) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == quote {
            return Some(out);
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            other @ ('\\' | '\'' | '"') => out.push(other),
            // Kept as written, as Python keeps an unknown escape.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    None
}

/// The chat format a run uses and the system message it falls back to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatTemplate {
    pub format: ChatFormat,
    /// The model template's default system message ([`default_system`]); `None` for a format
    /// named on the command line.
    pub default_system: Option<String>,
    /// The format was named (`--chat-template`), not recognised in the model's template.
    pub named: bool,
}

impl ChatTemplate {
    /// `named` (from `--chat-template`) wins; otherwise the model's template is recognised.
    pub fn choose(
        named: Option<ChatFormat>,
        model_template: Option<&str>,
    ) -> Result<ChatTemplate, ChatError> {
        if let Some(format) = named {
            return Ok(ChatTemplate {
                format,
                default_system: None,
                named: true,
            });
        }
        let Some(t) = model_template else {
            return Err(ChatError::NoTemplate);
        };
        match classify(t) {
            Some(Ok(format)) => Ok(ChatTemplate {
                format,
                default_system: match format {
                    ChatFormat::ChatMl => default_system(t),
                    _ => None,
                },
                named: false,
            }),
            Some(Err(builtin)) => Err(ChatError::Unsupported { builtin }),
            None => Err(ChatError::Unrecognised),
        }
    }

    /// The prompt text ([`ChatFormat::render`]); the template's default system message stands
    /// in for an absent (or empty) one.
    pub fn render(&self, system: Option<&str>, user: &str) -> String {
        let system = system
            .filter(|s| !s.is_empty())
            .or(self.default_system.as_deref());
        self.format.render(system, user)
    }
}

/// Who wrote a message of a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    /// OpenAI's `developer`: a turn of its own in harmony, a system message elsewhere.
    Developer,
    User,
    Assistant,
}

impl ChatTemplate {
    /// The prompt for a conversation (an optional system message first, then user and
    /// assistant turns ending with the user's), with the assistant's turn opened. One user
    /// message is exactly [`ChatTemplate::render`]; longer conversations are written for the
    /// ChatML, Llama 3 and Gemma formats as their templates write them, and refused by the
    /// others, whose multi-turn forms locus does not write.
    pub fn render_messages(&self, msgs: &[(Role, &str)]) -> Result<String, String> {
        if self.format == ChatFormat::GptOss {
            return harmony_messages(msgs);
        }
        // A developer message is a system message outside harmony.
        let as_system: Vec<(Role, &str)> = msgs
            .iter()
            .map(|&(r, t)| match r {
                Role::Developer => (Role::System, t),
                r => (r, t),
            })
            .collect();
        let msgs = as_system.as_slice();
        let (system, rest) = match msgs.split_first() {
            Some(((Role::System, s), rest)) => (Some(*s), rest),
            _ => (None, msgs),
        };
        if rest.iter().any(|(r, _)| *r == Role::System) {
            return Err("a system message is taken only as the first message".into());
        }
        match rest.last() {
            None => return Err("the conversation has no user message".into()),
            Some((Role::User, _)) => {}
            Some(_) => return Err("the last message must be the user's".into()),
        }
        if let [(_, user)] = rest {
            return Ok(self.render(system, user));
        }
        let system = system
            .filter(|s| !s.is_empty())
            .or(self.default_system.as_deref());
        let mut s = String::new();
        match self.format {
            ChatFormat::ChatMl | ChatFormat::Qwen => {
                let sys = match self.format {
                    ChatFormat::Qwen => Some(system.unwrap_or(QWEN_DEFAULT_SYSTEM)),
                    _ => system,
                };
                if let Some(sys) = sys {
                    s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                }
                for (r, text) in rest {
                    let role = if *r == Role::User {
                        "user"
                    } else {
                        "assistant"
                    };
                    s.push_str(&format!("<|im_start|>{role}\n{text}<|im_end|>\n"));
                }
                s.push_str("<|im_start|>assistant\n");
            }
            ChatFormat::Llama3 => {
                let turn = |s: &mut String, role: &str, text: &str| {
                    s.push_str(&format!(
                        "<|start_header_id|>{role}<|end_header_id|>\n\n{}<|eot_id|>",
                        c_trim(text)
                    ))
                };
                if let Some(sys) = system {
                    turn(&mut s, "system", sys);
                }
                for (r, text) in rest {
                    turn(
                        &mut s,
                        if *r == Role::User {
                            "user"
                        } else {
                            "assistant"
                        },
                        text,
                    );
                }
                s.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
            ChatFormat::Gemma => {
                let mut sys = system.map(c_trim).filter(|s| !s.is_empty());
                for (r, text) in rest {
                    let role = if *r == Role::User { "user" } else { "model" };
                    s.push_str(&format!("<start_of_turn>{role}\n"));
                    if *r == Role::User {
                        if let Some(p) = sys.take() {
                            s.push_str(&format!("{p}\n\n"));
                        }
                    }
                    s.push_str(&format!("{}<end_of_turn>\n", c_trim(text)));
                }
                s.push_str("<start_of_turn>model\n");
            }
            ChatFormat::Gemma4 => {
                let mut turns = Vec::with_capacity(msgs.len());
                turns.extend(system.map(|s| (Role::System, s)));
                turns.extend(rest.iter().copied());
                s = gemma4(&turns);
            }
            f => {
                let Some(w) = f.turn_writer() else {
                    return Err(format!(
                        "this model's chat format ({}) is written for one system and one user \
                         message only; send the conversation as one user message",
                        f.name()
                    ));
                };
                let mut turns = Vec::with_capacity(msgs.len());
                turns.extend(system.map(|s| (Role::System, s)));
                turns.extend(rest.iter().copied());
                s = w.write(&turns);
            }
        }
        Ok(s)
    }
}

/// A harmony conversation as llama.cpp's built-in `gpt-oss` template writes it: system and
/// developer messages first (empty ones left out, as an empty system message is elsewhere),
/// each message a turn of its own role, the last one the user's.
fn harmony_messages(msgs: &[(Role, &str)]) -> Result<String, String> {
    let is_instruction = |r: Role| matches!(r, Role::System | Role::Developer);
    let lead = msgs.iter().take_while(|(r, _)| is_instruction(*r)).count();
    if msgs[lead..].iter().any(|(r, _)| is_instruction(*r)) {
        return Err("system and developer messages are taken only before the others".into());
    }
    match msgs.last() {
        Some((Role::User, _)) => {}
        Some(_) if lead < msgs.len() => return Err("the last message must be the user's".into()),
        _ => return Err("the conversation has no user message".into()),
    }
    let turns: Vec<(Role, &str)> = msgs
        .iter()
        .copied()
        .filter(|&(r, t)| !(is_instruction(r) && t.is_empty()))
        .collect();
    let writer = ChatFormat::GptOss
        .turn_writer()
        .ok_or("harmony has a turn writer")?;
    Ok(writer.write(&turns))
}

/// Marks where message `i`'s content goes while a conversation is rendered to find it
/// ([`ChatTemplate::render_with_contents`]): private-use characters around its index.
fn content_marker(i: usize) -> String {
    format!("\u{E000}{i}\u{E001}")
}

impl ChatTemplate {
    /// [`ChatTemplate::render_messages`], and the byte ranges of the rendered text that are
    /// the contents of the messages marked in `find` (where they are, after any trimming the
    /// format does). Each marked message is rendered as a marker first: once with tabs around
    /// it (a format that trims drops them) and once alone; the contents then replace the
    /// markers. An error where the result is not the plain rendering (a format that does more
    /// to a content than trim it).
    pub fn render_with_contents(
        &self,
        msgs: &[(Role, &str)],
        find: &[bool],
    ) -> Result<(String, Vec<std::ops::Range<usize>>), String> {
        let plain = self.render_messages(msgs)?;
        if !find.iter().any(|&f| f) {
            return Ok((plain, Vec::new()));
        }
        let with = |wrap: &dyn Fn(usize) -> String| -> Result<String, String> {
            let texts: Vec<String> = msgs
                .iter()
                .enumerate()
                .map(|(i, (_, c))| if find[i] { wrap(i) } else { c.to_string() })
                .collect();
            let turns: Vec<(Role, &str)> = msgs
                .iter()
                .zip(&texts)
                .map(|((r, _), t)| (*r, t.as_str()))
                .collect();
            self.render_messages(&turns)
        };
        let probed = with(&|i| format!("\t{}\t", content_marker(i)))?;
        let marked = with(&content_marker)?;
        let (mut out, mut ranges, mut rest) = (String::new(), Vec::new(), marked.as_str());
        for (i, (_, content)) in msgs.iter().enumerate().filter(|(i, _)| find[*i]) {
            let m = content_marker(i);
            let Some(at) = rest.find(&m) else {
                return Err(format!(
                    "message {i}'s content is not where this format puts it"
                ));
            };
            out.push_str(&rest[..at]);
            let kept = probed.contains(&format!("\t{m}\t"));
            let content = if kept { content } else { c_trim(content) };
            ranges.push(out.len()..out.len() + content.len());
            out.push_str(content);
            rest = &rest[at + m.len()..];
        }
        out.push_str(rest);
        if out != plain {
            return Err(
                "a message's text holds control tokens, which this chat format cannot keep as text"
                    .into(),
            );
        }
        Ok((out, ranges))
    }
}

/// Why no chat format could be chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatError {
    /// The model file has no `tokenizer.chat_template`.
    NoTemplate,
    /// The template is llama.cpp's built-in `builtin`, which locus does not render.
    Unsupported { builtin: &'static str },
    /// The template matches no known format.
    Unrecognised,
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatError::NoTemplate => write!(f, "the model has no chat template")?,
            ChatError::Unsupported { builtin } => write!(
                f,
                "the model's chat template is llama.cpp's '{builtin}', which locus does not render"
            )?,
            ChatError::Unrecognised => write!(f, "the model's chat template is not recognised")?,
        }
        write!(
            f,
            "; pass --chat-template NAME, one of: {}",
            ChatFormat::NAMES.join(", ")
        )
    }
}

impl std::error::Error for ChatError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_are_written_turn_by_turn_where_the_format_allows() {
        let t = |format| ChatTemplate {
            format,
            default_system: None,
            named: true,
        };
        let conv = [
            (Role::System, "Be brief."),
            (Role::User, " Hi "),
            (Role::Assistant, "Hello."),
            (Role::User, "Capital of France?"),
        ];
        assert_eq!(
            t(ChatFormat::ChatMl).render_messages(&conv).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n\
             <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nCapital of France?\
             <|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            t(ChatFormat::Llama3).render_messages(&conv).unwrap(),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            t(ChatFormat::Gemma).render_messages(&conv).unwrap(),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.\
             <end_of_turn>\n<start_of_turn>user\nCapital of France?<end_of_turn>\n\
             <start_of_turn>model\n"
        );
        // One user message is exactly the single-turn prompt, in every format.
        for f in ChatFormat::ALL {
            assert_eq!(
                t(f).render_messages(&conv[..2]).unwrap(),
                t(f).render(Some("Be brief."), " Hi ")
            );
        }
        assert!(t(ChatFormat::Llama2).render_messages(&conv).is_err());
        assert!(t(ChatFormat::ChatMl).render_messages(&conv[..3]).is_err());
        assert!(t(ChatFormat::ChatMl).render_messages(&conv[..1]).is_err());
        let late_system = [(Role::User, "a"), (Role::System, "b"), (Role::User, "c")];
        assert!(t(ChatFormat::ChatMl).render_messages(&late_system).is_err());
    }

    // Expected strings below are written from llama.cpp's `llm_chat_apply_template`
    // (src/llama-chat.cpp, commit 0c1e570) for messages [system?, user] and add_ass = true,
    // and were checked against that function itself (see tests/data/golden/README.md).
    const SYS: &str = "Be brief.";
    const USER: &str = "Hi there";

    fn both(f: ChatFormat) -> (String, String) {
        (f.render(Some(SYS), USER), f.render(None, USER))
    }

    #[test]
    fn names_round_trip() {
        for f in ChatFormat::ALL {
            assert_eq!(ChatFormat::from_name(f.name()), Some(f));
        }
        assert_eq!(ChatFormat::NAMES.len(), ChatFormat::ALL.len());
        assert!(ChatFormat::NAMES.contains(&"gemma") && ChatFormat::NAMES.contains(&"llama2"));
        assert_eq!(ChatFormat::from_name("Gemma"), None);
        assert_eq!(ChatFormat::from_name("phi3"), None);
    }

    #[test]
    fn renders_chatml_and_qwen() {
        let (with, without) = both(ChatFormat::ChatMl);
        assert_eq!(
            with,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            without,
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
        let (q_with, q_without) = both(ChatFormat::Qwen);
        assert_eq!(q_with, with);
        assert_eq!(
            q_without,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
        // ChatML keeps white space as it is.
        assert_eq!(
            ChatFormat::ChatMl.render(Some(" s "), " u "),
            "<|im_start|>system\n s <|im_end|>\n<|im_start|>user\n u <|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn renders_llama3() {
        let (with, without) = both(ChatFormat::Llama3);
        assert_eq!(
            with,
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            without,
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        // Trimmed as C's isspace trims: a no-break space stays.
        assert_eq!(
            ChatFormat::Llama3.render(None, "\t Hi\u{a0}\n"),
            "<|start_header_id|>user<|end_header_id|>\n\nHi\u{a0}<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn renders_gemma() {
        let (with, without) = both(ChatFormat::Gemma);
        assert_eq!(
            with,
            "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            without,
            "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
        );
        // Both trimmed; a system message of white space merges nothing.
        assert_eq!(
            ChatFormat::Gemma.render(Some(" \n "), " Hi\n"),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            ChatFormat::Gemma.render(Some(" S "), "U"),
            "<start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn renders_harmony() {
        let t = ChatTemplate::choose(Some(ChatFormat::GptOss), None).unwrap();
        let (with, without) = both(ChatFormat::GptOss);
        assert_eq!(
            with,
            "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hi there<|end|>\
             <|start|>assistant"
        );
        assert_eq!(
            without,
            "<|start|>user<|message|>Hi there<|end|><|start|>assistant"
        );
        // The developer keeps its role; nothing is trimmed; empty instructions are left out.
        let conv = [
            (Role::System, ""),
            (Role::Developer, " Be French. "),
            (Role::User, "Hi"),
            (Role::Assistant, "Salut."),
            (Role::User, "Ok"),
        ];
        assert_eq!(
            t.render_messages(&conv).unwrap(),
            "<|start|>developer<|message|> Be French. <|end|><|start|>user<|message|>Hi<|end|>\
             <|start|>assistant<|message|>Salut.<|return|><|start|>user<|message|>Ok<|end|>\
             <|start|>assistant"
        );
        for bad in [
            &[(Role::User, "a"), (Role::Developer, "b"), (Role::User, "c")][..],
            &[(Role::Developer, "b")][..],
            &[(Role::User, "a"), (Role::Assistant, "b")][..],
        ] {
            assert!(t.render_messages(bad).is_err(), "{bad:?}");
        }
        // Elsewhere a developer message is a system message.
        let chatml = ChatTemplate::choose(Some(ChatFormat::ChatMl), None).unwrap();
        assert_eq!(
            chatml
                .render_messages(&[(Role::Developer, "D"), (Role::User, "U")])
                .unwrap(),
            ChatFormat::ChatMl.render(Some("D"), "U")
        );
    }

    #[test]
    fn renders_gemma4() {
        let t = ChatTemplate::choose(Some(ChatFormat::Gemma4), None).unwrap();
        let (with, without) = both(ChatFormat::Gemma4);
        assert_eq!(
            with,
            "<|turn>system\nBe brief.<turn|>\n<|turn>user\nHi there<turn|>\n\
             <|turn>model\n<|channel>thought\n<channel|>"
        );
        assert_eq!(
            without,
            "<|turn>user\nHi there<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
        );
        // C's isspace trims: a no-break space stays. Reasoning in an assistant's text goes, and
        // a second assistant message continues the model's turn.
        let conv = [
            (Role::User, "\u{a0}Hi \n"),
            (Role::Assistant, "A<|channel>thought\nx<channel|> B "),
            (Role::Assistant, "C"),
            (Role::User, "D"),
        ];
        assert_eq!(
            t.render_messages(&conv).unwrap(),
            "<|turn>user\n\u{a0}Hi<turn|>\n<|turn>model\nA B<turn|>\nC<turn|>\n\
             <|turn>user\nD<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
        );
    }

    #[test]
    fn renders_llama2_variants() {
        let (with, without) = both(ChatFormat::Llama2);
        assert_eq!(with, "[INST] Be brief.\nHi there [/INST]");
        assert_eq!(without, "[INST] Hi there [/INST]");
        for f in [ChatFormat::Llama2Sys, ChatFormat::Llama2SysBos] {
            let (with, without) = both(f);
            assert_eq!(
                with,
                "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST]"
            );
            assert_eq!(without, "[INST] Hi there [/INST]");
        }
        assert_eq!(
            ChatFormat::Llama2SysStrip.render(Some(" S\n"), "\tU "),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]"
        );
        assert_eq!(
            ChatFormat::Llama2Sys.render(Some(" S\n"), "\tU "),
            "[INST] <<SYS>>\n S\n\n<</SYS>>\n\n\tU  [/INST]"
        );
    }

    #[test]
    fn renders_mistral_variants() {
        let cases = [
            (
                ChatFormat::MistralV1,
                " [INST] Be brief.\n\nHi there [/INST]",
                " [INST] Hi there [/INST]",
            ),
            (
                ChatFormat::MistralV3,
                "[INST] Be brief.\n\nHi there[/INST]",
                "[INST] Hi there[/INST]",
            ),
            (
                ChatFormat::MistralV3Tekken,
                "[INST]Be brief.\n\nHi there[/INST]",
                "[INST]Hi there[/INST]",
            ),
            (
                ChatFormat::MistralV7,
                "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi there[/INST]",
                "[INST] Hi there[/INST]",
            ),
            (
                ChatFormat::MistralV7Tekken,
                "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi there[/INST]",
                "[INST]Hi there[/INST]",
            ),
        ];
        for (f, with, without) in cases {
            assert_eq!(both(f), (with.to_string(), without.to_string()), "{f:?}");
        }
    }

    #[test]
    fn empty_system_is_none() {
        for f in ChatFormat::ALL {
            assert_eq!(f.render(Some(""), USER), f.render(None, USER), "{f:?}");
        }
    }

    #[test]
    fn detects_in_llama_cpp_order() {
        let cases: [(&str, Option<Result<ChatFormat, &str>>); 29] = [
            (
                "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}",
                Some(Ok(ChatFormat::ChatMl)),
            ),
            ("<|im_start|>{{ role }}<|im_sep|>", Some(Err("phi4"))),
            ("<|im_start|>User:<end_of_utterance>", Some(Err("smolvlm"))),
            (
                "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}",
                Some(Ok(ChatFormat::Llama3)),
            ),
            (
                "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
                Some(Ok(ChatFormat::Gemma)),
            ),
            ("{{ bos_token + '[INST] ' + content + ' [/INST]' }}", Some(Ok(ChatFormat::Llama2SysBos))),
            (
                "{{ '[INST] ' + content.strip() + ' [/INST]' }}<<SYS>>",
                Some(Ok(ChatFormat::Llama2SysStrip)),
            ),
            ("[INST] <<SYS>>\n{{ system }}\n<</SYS>>", Some(Ok(ChatFormat::Llama2Sys))),
            ("{{ '[INST] ' + content + ' [/INST]' }}", Some(Ok(ChatFormat::Llama2))),
            (
                "{{ ' [INST] ' + system_message + '\\n\\n' + content + ' [/INST]' }}",
                Some(Ok(ChatFormat::MistralV1)),
            ),
            ("[AVAILABLE_TOOLS]{{ '[INST]' }}", Some(Ok(ChatFormat::MistralV3))),
            ("[AVAILABLE_TOOLS]{{ \"[INST]\" }}", Some(Ok(ChatFormat::MistralV3Tekken))),
            ("[SYSTEM_PROMPT][INST]", Some(Ok(ChatFormat::MistralV7))),
            ("mistral-v7-tekken", Some(Ok(ChatFormat::MistralV7Tekken))),
            // Phi 3 is tested before Llama 3 and Gemma: its markers win.
            ("<|assistant|><|end|><|start_header_id|><|end_header_id|>", Some(Err("phi3"))),
            ("{{ messages }}", None),
            ("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>", Some(Ok(ChatFormat::ChatGlm4))),
            ("[gMASK]sop<|user|>", Some(Err("chatglm3"))),
            (
                "{{ 'Assistant: ' + message['content'] + eos_token }}",
                Some(Ok(ChatFormat::DeepSeek2)),
            ),
            (
                "<｜User｜>{{ c }}<｜Assistant｜>{{ c }}<｜end▁of▁sentence｜>",
                Some(Ok(ChatFormat::DeepSeek3)),
            ),
            // Llama 3's markers are tested first.
            (
                "<｜User｜><｜Assistant｜><｜end▁of▁sentence｜><|start_header_id|><|end_header_id|>",
                Some(Ok(ChatFormat::Llama3)),
            ),
            ("<|im_user|>user<|im_middle|><|im_assistant|>assistant<|im_middle|>", Some(Ok(ChatFormat::KimiK2))),
            // Every built-in between DeepSeek-V3 and Kimi-K2 comes first, e.g. gpt-oss.
            (
                "<|start|><|channel|><|im_assistant|>assistant<|im_middle|>",
                Some(Ok(ChatFormat::GptOss)),
            ),
            // Those before harmony come before it, those after it after.
            ("<|start|><|channel|><|extra_0|><|extra_4|>", Some(Err("hunyuan-moe"))),
            (
                "<|start|><|channel|><｜hy_Assistant｜><｜hy_begin▁of▁sentence｜>",
                Some(Ok(ChatFormat::GptOss)),
            ),
            (
                "<｜hy_Assistant｜><｜hy_begin▁of▁sentence｜>",
                Some(Err("hunyuan-vl")),
            ),
            // Gemma 4, which llama.cpp does not recognise, after all of them.
            ("{{ '<|turn>' + role }}{{ '<turn|>' }}", Some(Ok(ChatFormat::Gemma4))),
            ("<|turn><turn|><start_of_turn>", Some(Ok(ChatFormat::Gemma))),
            // `qwen` is a locus name, not llama.cpp's: as a template text it is nothing.
            ("qwen", None),
        ];
        for (t, want) in cases {
            assert_eq!(classify(t), want, "{t}");
            assert_eq!(ChatFormat::detect(t), want.and_then(Result::ok), "{t}");
        }
    }

    // Qwen2.5-Instruct's template (the tools branch cut short); its newlines are `\n` escapes.
    const QWEN25: &str = "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
    // SmolLM2-Instruct's template as its GGUF stores it: the newlines are real.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    // Qwen2-Instruct's template.
    const QWEN2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn reads_a_chatml_default_system_message() {
        assert_eq!(default_system(QWEN25).as_deref(), Some(QWEN_DEFAULT_SYSTEM));
        assert_eq!(
            default_system(SMOLLM2).as_deref(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        assert_eq!(
            default_system(QWEN2).as_deref(),
            Some("You are a helpful assistant.")
        );
        // Escaped quotes inside a double-quoted literal.
        assert_eq!(
            default_system("{{ \"<|im_start|>system\\nSay \\\"hi\\\".<|im_end|>\\n\" }}")
                .as_deref(),
            Some("Say \"hi\".")
        );
        // No default: only the user's system message is written.
        let plain = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}";
        assert_eq!(default_system(plain), None);
        // Two defaults that disagree: none is trusted.
        assert_eq!(
            default_system(
                "'<|im_start|>system\\nA<|im_end|>\\n' '<|im_start|>system\\nB<|im_end|>\\n'"
            ),
            None
        );
        // An unterminated literal is no default.
        assert_eq!(default_system("'<|im_start|>system\\nA<|im_end|>\\n"), None);
    }

    #[test]
    fn chooses_the_model_template_or_the_named_one() {
        let t = ChatTemplate::choose(None, Some(QWEN25)).unwrap();
        assert_eq!(t.format, ChatFormat::ChatMl);
        // The model's default stands in for no system message, as its Jinja template renders.
        assert_eq!(t.render(None, USER), ChatFormat::Qwen.render(None, USER));
        assert_eq!(
            t.render(Some(""), USER),
            ChatFormat::Qwen.render(None, USER)
        );
        assert_eq!(
            t.render(Some(SYS), USER),
            ChatFormat::ChatMl.render(Some(SYS), USER)
        );
        // A named format is llama.cpp's built-in one, with no default.
        let named = ChatTemplate::choose(Some(ChatFormat::ChatMl), Some(QWEN25)).unwrap();
        assert_eq!(
            named.render(None, USER),
            ChatFormat::ChatMl.render(None, USER)
        );
        let gemma = ChatTemplate::choose(Some(ChatFormat::Gemma), None).unwrap();
        assert_eq!(
            gemma.render(Some(SYS), USER),
            ChatFormat::Gemma.render(Some(SYS), USER)
        );
        let l3 = ChatTemplate::choose(None, Some("<|start_header_id|><|end_header_id|>")).unwrap();
        assert_eq!((l3.format, l3.default_system), (ChatFormat::Llama3, None));
    }

    #[test]
    fn errors_name_the_choices() {
        for (template, why) in [
            (None, "has no chat template"),
            (Some("{{ messages }}"), "not recognised"),
            (Some("<|assistant|><|end|>"), "llama.cpp's 'phi3'"),
        ] {
            let e = ChatTemplate::choose(None, template)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{e}");
            assert!(e.contains("--chat-template"), "{e}");
            for name in ChatFormat::NAMES {
                assert!(e.contains(name), "{e} lacks {name}");
            }
        }
    }
}
