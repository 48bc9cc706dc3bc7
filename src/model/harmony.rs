//! Reading a gpt-oss answer: harmony's `analysis` channel is the reasoning, its `final` (and
//! `commentary` preamble) channels the answer, as llama-server's gpt-oss parser
//! (`common/parsers/gpt-oss.cpp`, without tools, reasoning extracted) splits them into
//! `reasoning_content` and `content`.
//!
//! The generated text follows a prompt that ends with `<|start|>assistant`. Each message is a
//! header, `<|message|>`, its text and `<|end|>`; the next one starts with `<|start|>assistant`:
//! `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…`.
//! A message's header may start with a stray `<|channel|>commentary[ to=assistant]` before its
//! `analysis` or `final` channel; a message addressed to a recipient (` to=…`, an unsolicited
//! tool call) is read over and dropped. `<|end|>` is a control token, which locus (unlike
//! llama-server, which keeps it as a preserved token) does not render, so the `<|start|>` of the
//! next message ends a message too. Text that does not parse is the answer as it stands.

/// `<|start|>`, which opens every message.
const START: &str = "<|start|>";
/// What opens an assistant message.
const START_ASSISTANT: &str = "<|start|>assistant";
/// The end of a message.
const END: &str = "<|end|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
/// The markers a text ending mid-way may be cut inside (held back while streaming).
const MARKERS: [&str; 4] = [END, START_ASSISTANT, CHANNEL, MESSAGE];

/// An answer split into its reasoning and its content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The `analysis` channel's text (llama-server's `reasoning_content`).
    pub reasoning: String,
    /// The `final` channel's text, after any `commentary` preamble.
    pub content: String,
}

/// What one message is.
enum Kind {
    Reasoning,
    Content,
    /// A message to a recipient: read over.
    Dropped,
}

/// `text` without the header `prefix`, if it starts with it.
fn after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.strip_prefix(prefix)
}

/// The header of a message at `body` (after `<|start|>assistant`): its kind and where its
/// text starts.
fn header(body: &str) -> Option<(Kind, &str)> {
    // `<|channel|>commentary<|message|>`: a preamble, part of the answer.
    if let Some(rest) = after(body, "<|channel|>commentary<|message|>") {
        return Some((Kind::Content, rest));
    }
    // `[<|channel|>commentary[ to=assistant]]<|channel|>(analysis|final)<|message|>`
    let unstrayed = after(body, "<|channel|>commentary")
        .map(|r| after(r, " to=assistant").unwrap_or(r))
        .unwrap_or(body);
    if let Some(rest) = after(unstrayed, "<|channel|>analysis<|message|>") {
        return Some((Kind::Reasoning, rest));
    }
    if let Some(rest) = after(unstrayed, "<|channel|>final<|message|>") {
        return Some((Kind::Content, rest));
    }
    // `[<|channel|>(commentary|analysis)] to=…`: a message to a recipient.
    let unchanneled = ["<|channel|>commentary", "<|channel|>analysis"]
        .iter()
        .find_map(|c| after(body, c))
        .unwrap_or(body);
    if unchanneled.starts_with(" to=") {
        return Some((Kind::Dropped, unchanneled));
    }
    None
}

/// How much of `text`'s end could be the start of a marker cut off by the end of the text.
fn held_back(text: &str) -> usize {
    (1..=text.len())
        .rev()
        .filter(|&n| text.is_char_boundary(text.len() - n))
        .find(|&n| {
            let tail = &text[text.len() - n..];
            MARKERS.iter().any(|m| m.len() > n && m.starts_with(tail))
        })
        .unwrap_or(0)
}

/// Splits generated text. `partial`: the text may go on (streaming), so a marker that may be
/// cut off at its end is held back rather than taken as text.
pub fn split(generated: &str, partial: bool) -> Split {
    let text = if partial {
        &generated[..generated.len() - held_back(generated)]
    } else {
        generated
    };
    let mut out = Split::default();
    let mut body = text;
    loop {
        let Some((kind, rest)) = header(body) else {
            // Not harmony (or a header cut short while streaming): the text as it stands,
            // unless it could still become a header.
            let could_grow = partial
                && ["<|channel|>", " to="]
                    .iter()
                    .any(|h| h.starts_with(body) || body.starts_with(h) && !body.contains(MESSAGE));
            if !could_grow {
                out.content.push_str(body);
            }
            return out;
        };
        let end = [END, START]
            .iter()
            .filter_map(|m| rest.find(m))
            .min()
            .unwrap_or(rest.len());
        let message = &rest[..end];
        match kind {
            Kind::Reasoning => out.reasoning.push_str(message),
            Kind::Content => out.content.push_str(message),
            Kind::Dropped => {}
        }
        let next = &rest[end..];
        let next = after(next, END).unwrap_or(next);
        match after(next, START_ASSISTANT) {
            Some(b) => body = b,
            // The end of the answer (or something after it that is not a message).
            None => return out,
        }
    }
}

/// Splits an answer as it streams: each call takes the whole text so far and returns what
/// is new in the reasoning and in the content since the last call.
#[derive(Default)]
pub struct Stream {
    reasoning_sent: usize,
    content_sent: usize,
}

impl Stream {
    /// The new reasoning and new content (each possibly empty); `done` on the last call.
    pub fn update(&mut self, generated: &str, done: bool) -> (String, String) {
        let s = split(generated, !done);
        let new = |all: &str, sent: &mut usize| {
            let from = (*sent).min(all.len());
            let delta = all.get(from..).unwrap_or("").to_string();
            *sent = all.len().max(*sent);
            delta
        };
        (
            new(&s.reasoning, &mut self.reasoning_sent),
            new(&s.content, &mut self.content_sent),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(reasoning: &str, content: &str) -> Split {
        Split {
            reasoning: reasoning.into(),
            content: content.into(),
        }
    }

    const HELLO: &str = "Hello, world!\nWhat's up?";

    /// llama.cpp's own cases (tests/test-chat.cpp, "GPT-OSS format tests", those without
    /// tools or a schema, reasoning extracted), as llama.cpp renders `<|end|>`.
    #[test]
    fn llama_cpp_cases() {
        let cases = [
            ("<|channel|>final<|message|>Hello, world!\nWhat's up?", s("", HELLO)),
            ("<|channel|>commentary<|message|>Hello, world!\nWhat's up?", s("", HELLO)),
            (
                "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
                s("I'm\nthinking", HELLO),
            ),
            (
                "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
                s("I will execute python to say hello", ""),
            ),
            (
                "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print(\"hello\")",
                s("I will execute python to say hello", ""),
            ),
            (
                "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
                s("I'm\nthinking", HELLO),
            ),
            (
                "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
                s("I'm\nthinking", HELLO),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(split(text, false), want, "{text}");
            // As locus renders it: `<|end|>` is a control token, left out.
            let without_end = text.replace(END, "");
            assert_eq!(split(&without_end, false), want, "{without_end}");
        }
        // Partial: an analysis still being written is reasoning so far.
        assert_eq!(
            split("<|channel|>analysis<|message|>I'm\nthinking", true),
            s("I'm\nthinking", "")
        );
    }

    /// A call to a function in the `commentary` channel (`to=functions.NAME`, JSON arguments),
    /// as gpt-oss writes one, where the request gave no tools: read over, as llama-server's
    /// `unsolicited` rule does, never shown as content, whole or while it streams. Its
    /// `<|call|>` is a control token (an end of generation), never part of the text.
    #[test]
    fn a_function_call_is_not_content() {
        let call = "<|channel|>commentary to=functions.get_weather <|constrain|>json\
                    <|message|>{\"location\":\"Paris\"}";
        let after_analysis = format!(
            "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant{call}"
        );
        let in_role = " to=functions.get_weather<|channel|>commentary <|constrain|>json\
                       <|message|>{\"location\":\"Paris\"}";
        for (text, reasoning) in [
            (call.to_string(), ""),
            (after_analysis, "Need the weather."),
            (in_role.to_string(), ""),
        ] {
            assert_eq!(split(&text, false), s(reasoning, ""), "{text}");
            let mut stream = Stream::default();
            let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
            let (mut r, mut c) = (String::new(), String::new());
            for &cut in cuts.iter().chain([text.len()].iter()) {
                let (dr, dc) = stream.update(&text[..cut], cut == text.len());
                r.push_str(&dr);
                c.push_str(&dc);
                assert!(c.is_empty(), "content {c:?} at {cut} of {text}");
            }
            assert_eq!(r, reasoning, "{text}");
        }
    }

    #[test]
    fn text_that_is_not_harmony_is_the_answer() {
        assert_eq!(split("plain answer", false), s("", "plain answer"));
        assert_eq!(split("", false), s("", ""));
    }

    #[test]
    fn streaming_gives_the_same_text_in_deltas() {
        let text = "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant\
                    <|channel|>final<|message|>Paris <|is> the capital.";
        // Fed a code point at a time, and a special token at a time.
        let mut cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        cuts.push(text.len());
        let mut stream = Stream::default();
        let (mut reasoning, mut content) = (String::new(), String::new());
        for (k, &cut) in cuts.iter().enumerate() {
            let (r, c) = stream.update(&text[..cut], k + 1 == cuts.len());
            reasoning.push_str(&r);
            content.push_str(&c);
            // Never a piece of a marker that later turns out to be one.
            assert!(
                "Let me think.".starts_with(&reasoning),
                "{reasoning:?} at {cut}"
            );
            assert!(
                "Paris <|is> the capital.".starts_with(&content),
                "{content:?} at {cut}"
            );
        }
        assert_eq!(reasoning, "Let me think.");
        assert_eq!(content, "Paris <|is> the capital.");
        assert_eq!(split(text, false), s(&reasoning, &content));
    }
}
