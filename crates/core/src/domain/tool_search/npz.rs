//! Arrays from a NumPy `.npz` file (a zip of `.npy` files, NumPy's documented format):
//! how the sentence encoder's weights are shipped.

use std::io::Read;

/// One array: its shape and its elements in C order.
pub(super) struct Array<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

/// An element type an array may be read as, by its NumPy `descr`.
pub(super) trait Element: Sized + Copy {
    const DESCR: &'static [&'static str];
    const SIZE: usize;
    fn from_le(bytes: &[u8]) -> Self;
}

impl Element for f32 {
    const DESCR: &'static [&'static str] = &["<f4"];
    const SIZE: usize = 4;
    fn from_le(bytes: &[u8]) -> Self {
        f32::from_le_bytes(bytes.try_into().unwrap())
    }
}

impl Element for f64 {
    const DESCR: &'static [&'static str] = &["<f8"];
    const SIZE: usize = 8;
    fn from_le(bytes: &[u8]) -> Self {
        f64::from_le_bytes(bytes.try_into().unwrap())
    }
}

impl Element for u8 {
    const DESCR: &'static [&'static str] = &["|u1", "<u1"];
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes[0]
    }
}

/// An archive of `.npy` members, each read (and decompressed) when it is asked for, so that
/// loading holds one member at a time besides what was already converted.
pub(super) struct Npz {
    archive: std::cell::RefCell<zip::ZipArchive<std::io::Cursor<Vec<u8>>>>,
}

impl Npz {
    pub(super) fn read(bytes: Vec<u8>) -> Result<Self, String> {
        let archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
            .map_err(|error| format!("it is not a NumPy .npz archive ({error})"))?;
        Ok(Npz {
            archive: std::cell::RefCell::new(archive),
        })
    }

    fn member(&self, name: &str) -> Result<Vec<u8>, String> {
        let mut archive = self.archive.borrow_mut();
        let mut member = archive
            .by_name(&format!("{name}.npy"))
            .map_err(|_| format!("it has no array `{name}`"))?;
        let mut content = Vec::with_capacity(member.size() as usize);
        member
            .read_to_end(&mut content)
            .map_err(|error| format!("its array `{name}` cannot be read ({error})"))?;
        Ok(content)
    }

    /// The array `name`, which must hold `T`s in C order.
    pub(super) fn array<T: Element>(&self, name: &str) -> Result<Array<T>, String> {
        let bytes = self.member(name)?;
        let bad = |why: &str| format!("its array `{name}` {why}");
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(bad("is not in the .npy format"));
        }
        let (header_len, header_start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
                12,
            ),
            _ => return Err(bad("has an unknown .npy version")),
        };
        let header = bytes
            .get(header_start..header_start + header_len)
            .and_then(|header| std::str::from_utf8(header).ok())
            .ok_or_else(|| bad("has a broken header"))?;
        let descr = header_value(header, "descr")
            .map(|d| d.trim_matches(|c| c == '\'' || c == '"'))
            .ok_or_else(|| bad("has no element type"))?;
        if !T::DESCR.contains(&descr) {
            return Err(bad(&format!(
                "holds `{descr}`, not `{}`",
                T::DESCR.join("` or `")
            )));
        }
        if header_value(header, "fortran_order") != Some("False") {
            return Err(bad("is not in C order"));
        }
        let shape_text = header
            .split_once("'shape':")
            .and_then(|(_, rest)| rest.split_once('('))
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(shape, _)| shape)
            .ok_or_else(|| bad("has no shape"))?;
        let shape = shape_text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| part.parse::<usize>().map_err(|_| bad("has a broken shape")))
            .collect::<Result<Vec<_>, _>>()?;
        let count: usize = shape.iter().product();
        let data = &bytes[header_start + header_len..];
        if data.len() != count * T::SIZE {
            return Err(bad("is cut short"));
        }
        Ok(Array {
            shape,
            data: data.chunks_exact(T::SIZE).map(T::from_le).collect(),
        })
    }
}

/// `'key': value` of a `.npy` header (a Python dict literal), for a value without commas.
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let (_, rest) = header.split_once(&format!("'{key}':"))?;
    Some(rest.split(',').next()?.trim())
}
