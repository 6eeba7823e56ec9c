//! A SentencePiece unigram tokenizer, read from the model's `.model` file: the text the
//! sentence encoder embeds, as the token ids it was trained on.
//!
//! Normalising follows SentencePiece's own `Normalizer::NormalizePrefix` (the longest
//! match of the model's precompiled character map at each byte), not a per-grapheme
//! approximation, so the ids are the ones the reference library gives. Segmenting is the
//! unigram model's Viterbi search over the vocabulary, ties broken as the library does.

use std::collections::HashMap;

use prost::Message;

/// The parts of SentencePiece's `ModelProto` a unigram tokenizer needs.
#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(message, repeated, tag = "1")]
    pieces: Vec<PieceProto>,
    #[prost(message, optional, tag = "3")]
    normalizer_spec: Option<NormalizerSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct PieceProto {
    #[prost(string, optional, tag = "1")]
    piece: Option<String>,
    #[prost(float, optional, tag = "2")]
    score: Option<f32>,
    /// 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte.
    #[prost(int32, optional, tag = "3")]
    kind: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct NormalizerSpec {
    #[prost(bytes = "vec", optional, tag = "2")]
    precompiled_charsmap: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "3")]
    add_dummy_prefix: Option<bool>,
    #[prost(bool, optional, tag = "4")]
    remove_extra_whitespaces: Option<bool>,
    #[prost(bool, optional, tag = "5")]
    escape_whitespaces: Option<bool>,
}

const UNKNOWN_PIECE: i32 = 2;
const CONTROL_PIECE: i32 = 3;
const UNUSED_PIECE: i32 = 5;
/// The id of `<unk>`, `<s>` and `</s>` in SentencePiece models.
const UNK_ID: u32 = 0;
const BOS_ID: u32 = 1;
pub(super) const EOS_ID: u32 = 2;
/// SentencePiece's visible space, U+2581.
const SPACE: &str = "\u{2581}";

/// A unigram SentencePiece model.
pub(super) struct SentencePiece {
    normalizer: Normalizer,
    /// Every piece and every prefix of one → the piece's id + 1, or 0 for a prefix only.
    prefixes: HashMap<Box<str>, u32>,
    scores: Vec<f32>,
    /// The longest piece, in characters.
    longest: usize,
    unknown_score: f32,
}

impl SentencePiece {
    /// Reads a `.model` file's bytes; why not, when they are not a SentencePiece model.
    pub(super) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let model = ModelProto::decode(bytes)
            .map_err(|error| format!("it is not a SentencePiece model ({error})"))?;
        if model.pieces.is_empty() {
            return Err("it is not a SentencePiece model (it has no pieces)".into());
        }
        let mut prefixes: HashMap<Box<str>, u32> = HashMap::new();
        let mut scores = Vec::with_capacity(model.pieces.len());
        let mut longest = 0;
        for (id, piece) in model.pieces.iter().enumerate() {
            scores.push(piece.score.unwrap_or(0.0));
            let text = piece.piece.as_deref().unwrap_or("");
            // As in the library: unknown, control and unused pieces are never matched.
            if text.is_empty()
                || matches!(
                    piece.kind,
                    Some(UNKNOWN_PIECE | CONTROL_PIECE | UNUSED_PIECE)
                )
            {
                continue;
            }
            longest = longest.max(text.chars().count());
            for (end, _) in text.char_indices().skip(1) {
                prefixes.entry(text[..end].into()).or_insert(0);
            }
            prefixes.insert(text.into(), id as u32 + 1);
        }
        let lowest = scores.iter().copied().fold(f32::INFINITY, f32::min);
        let spec = model.normalizer_spec.unwrap_or_default();
        let normalizer = Normalizer::new(
            spec.precompiled_charsmap.as_deref().unwrap_or_default(),
            spec.add_dummy_prefix.unwrap_or(true),
            spec.remove_extra_whitespaces.unwrap_or(true),
            spec.escape_whitespaces.unwrap_or(true),
        )?;
        Ok(SentencePiece {
            normalizer,
            prefixes,
            scores,
            longest,
            unknown_score: lowest - 10.0,
        })
    }

    /// How many ids the model has.
    pub(super) fn vocabulary_size(&self) -> usize {
        self.scores.len()
    }

    /// `text` as ids, between `<s>` and `</s>`.
    pub(super) fn encode(&self, text: &str) -> Vec<u32> {
        let normalized = self.normalizer.normalize(text);
        let mut ids = vec![BOS_ID];
        if normalized.is_empty() {
            ids.push(UNK_ID);
        } else {
            ids.extend(self.viterbi(&normalized));
        }
        ids.push(EOS_ID);
        ids
    }

    /// The best segmentation. Every node starting at a position shares that position's
    /// best predecessor, so a left-to-right pass over positions finds it; a later node
    /// replaces an earlier one only when strictly better, as the library breaks ties.
    fn viterbi(&self, text: &str) -> Vec<u32> {
        // Byte offsets of the characters, and the end.
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(at, _)| at)
            .chain(std::iter::once(text.len()))
            .collect();
        let chars = bounds.len() - 1;
        let mut best = vec![f32::NEG_INFINITY; chars + 1];
        best[0] = 0.0;
        let mut start_of = vec![0usize; chars + 1];
        let mut piece_of = vec![UNK_ID; chars + 1];
        for start in 0..chars {
            let base = best[start];
            let mut single = false;
            for end in start + 1..=(start + self.longest).min(chars) {
                let Some(&entry) = self.prefixes.get(&text[bounds[start]..bounds[end]]) else {
                    break;
                };
                if entry == 0 {
                    continue;
                }
                let score = base + self.scores[entry as usize - 1];
                if score > best[end] {
                    best[end] = score;
                    start_of[end] = start;
                    piece_of[end] = entry - 1;
                }
                single |= end == start + 1;
            }
            if !single {
                let score = base + self.unknown_score;
                if score > best[start + 1] {
                    best[start + 1] = score;
                    start_of[start + 1] = start;
                    piece_of[start + 1] = UNK_ID;
                }
            }
        }
        let mut ids = Vec::new();
        let mut at = chars;
        while at > 0 {
            ids.push(piece_of[at]);
            at = start_of[at];
        }
        ids.reverse();
        ids
    }
}

/// SentencePiece's normaliser: the precompiled character map (a darts-clone double-array
/// trie and the replacement strings), and its whitespace rules.
struct Normalizer {
    units: Vec<u32>,
    replacements: Vec<u8>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

impl Normalizer {
    fn new(
        charsmap: &[u8],
        add_dummy_prefix: bool,
        remove_extra_whitespaces: bool,
        escape_whitespaces: bool,
    ) -> Result<Self, String> {
        let (units, replacements) = if charsmap.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let broken = || "its character map is cut short".to_string();
            let size = u32::from_le_bytes(charsmap.get(..4).ok_or_else(broken)?.try_into().unwrap())
                as usize;
            let trie = charsmap.get(4..4 + size).ok_or_else(broken)?;
            let units = trie
                .chunks_exact(4)
                .map(|unit| u32::from_le_bytes(unit.try_into().unwrap()))
                .collect();
            (units, charsmap[4 + size..].to_vec())
        };
        Ok(Normalizer {
            units,
            replacements,
            add_dummy_prefix,
            remove_extra_whitespaces,
            escape_whitespaces,
        })
    }

    fn offset(unit: u32) -> usize {
        ((unit >> 10) << ((unit & 0x200) >> 6)) as usize
    }

    /// What the text at `at` normalises to, and how many bytes that consumed: the longest
    /// key of the map there, else the character itself.
    fn prefix<'a>(&'a self, text: &'a [u8], at: usize) -> (&'a [u8], usize) {
        let mut best: Option<(usize, usize)> = None;
        if let Some(&root) = self.units.first() {
            let mut node = Self::offset(root);
            for (i, &byte) in text[at..].iter().enumerate() {
                node ^= byte as usize;
                let Some(&unit) = self.units.get(node) else {
                    break;
                };
                if unit & 0x8000_00FF != byte as u32 {
                    break;
                }
                node ^= Self::offset(unit);
                if unit & 0x100 != 0 {
                    let Some(&value) = self.units.get(node) else {
                        break;
                    };
                    best = Some((i + 1, (value & 0x7FFF_FFFF) as usize));
                }
            }
        }
        if let Some((length, value)) = best
            && value < self.replacements.len()
        {
            let end = self.replacements[value..]
                .iter()
                .position(|&b| b == 0)
                .map_or(self.replacements.len(), |n| value + n);
            return (&self.replacements[value..end], length);
        }
        // The text is a `str`, so `at` starts a whole character.
        let length = match text[at] {
            b if b < 0x80 => 1,
            b if b >> 5 == 0b110 => 2,
            b if b >> 4 == 0b1110 => 3,
            _ => 4,
        }
        .min(text.len() - at);
        (&text[at..at + length], length)
    }

    fn normalize(&self, text: &str) -> String {
        let raw = text.as_bytes();
        let space: &[u8] = if self.escape_whitespaces {
            SPACE.as_bytes()
        } else {
            b" "
        };
        let strip = self.remove_extra_whitespaces;
        let mut at = 0;
        if strip {
            while at < raw.len() {
                let (piece, consumed) = self.prefix(raw, at);
                if piece != b" " {
                    break;
                }
                at += consumed;
            }
        }
        if at >= raw.len() {
            return String::new();
        }
        let mut out = Vec::with_capacity(raw.len() + 8);
        if self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        let mut previous_space = strip;
        while at < raw.len() {
            let (mut piece, consumed) = self.prefix(raw, at);
            at += consumed;
            if strip && previous_space {
                while let [b' ', rest @ ..] = piece {
                    piece = rest;
                }
            }
            if let Some(&last) = piece.last() {
                for &byte in piece {
                    if byte == b' ' {
                        out.extend_from_slice(space);
                    } else {
                        out.push(byte);
                    }
                }
                previous_space = last == b' ';
            }
        }
        if strip {
            while out.ends_with(space) {
                out.truncate(out.len() - space.len());
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}
