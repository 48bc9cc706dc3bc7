//! `locus tokenize`: llama-tokenize's output shapes. `--ids` prints `[id, id, ...]`; otherwise
//! one `id -> 'piece'` per line. `--chat` tokenizes the prompt `run --chat` would evaluate.

use std::path::PathBuf;

use super::AppError;
use crate::model::chat::{ChatFormat, ChatTemplate};
use crate::model::tokenizer::Tokenizer;
use crate::model::ModelFile;

/// Where the text comes from.
#[derive(Clone, Debug)]
pub enum TextSource {
    Text(String),
    /// Every byte kept (llama-tokenize's `-f` keeps the trailing newline).
    File(PathBuf),
    Stdin,
}

#[derive(Clone, Debug)]
pub struct TokenizeOptions {
    pub model: PathBuf,
    pub text: TextSource,
    pub ids_only: bool,
    pub parse_special: bool,
    /// `--chat`: the text is a user message, wrapped as `run --chat` wraps it.
    pub chat: Option<ChatOptions>,
}

/// The chat prompt's settings (`--chat-template NAME`, `--system TEXT`).
#[derive(Clone, Debug, Default)]
pub struct ChatOptions {
    pub template: Option<ChatFormat>,
    pub system: Option<String>,
}

/// Formats ids as llama-tokenize's `--ids` does.
pub fn format_ids(ids: &[u32]) -> String {
    let inner: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    format!("[{}]", inner.join(", "))
}

pub fn run(opts: &TokenizeOptions) -> Result<Vec<u32>, AppError> {
    // Only the vocabulary is needed, so any architecture's file will do.
    let file = ModelFile::open(&opts.model)?;
    let tokenizer = Tokenizer::from_gguf(&file.gguf()?)?;
    let why = "locus tokenizes at most 256 MiB";
    let text = match &opts.text {
        TextSource::Text(t) => t.clone(),
        TextSource::File(p) => super::read_text_capped(p, super::MAX_TEXT_BYTES, "the text", why)?,
        TextSource::Stdin => super::read_stdin_capped(super::MAX_TEXT_BYTES, why)?,
    };
    let text = match &opts.chat {
        None => text,
        Some(c) => ChatTemplate::choose(c.template, tokenizer.chat_template())
            .map_err(|e| AppError::Usage(e.to_string()))?
            .render(c.system.as_deref(), &text),
    };
    let ids = tokenizer.encode(&text, true, opts.parse_special);
    let mut text = String::new();
    if opts.ids_only {
        text = format!("{}\n", format_ids(&ids));
    } else {
        for &id in &ids {
            let piece = tokenizer.token_to_piece(id, true);
            text.push_str(&format!(
                "{id:6} -> '{}'\n",
                String::from_utf8_lossy(&piece)
            ));
        }
    }
    super::write_stdout(&text)?;
    Ok(ids)
}
