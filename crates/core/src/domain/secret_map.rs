//! Header and env maps whose values are secrets.

use std::collections::BTreeMap;
use std::fmt;

/// What a secret value looks like in every response. Sending it back in an update means
/// "keep the stored value", so a client can round-trip GET -> PUT without knowing secrets.
pub const MASK: &str = "********";

/// Name -> secret value. `Debug` prints names only, so a stray `{:?}` cannot leak values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretMap(BTreeMap<String, String>);

impl SecretMap {
    pub fn new(map: BTreeMap<String, String>) -> Self {
        Self(map)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Values in clear: only for the store (to seal them) and for launching upstreams.
    pub fn expose(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// The same names with every value replaced by [`MASK`].
    pub fn masked(&self) -> BTreeMap<String, String> {
        self.0
            .keys()
            .map(|k| (k.clone(), MASK.to_owned()))
            .collect()
    }

    /// Applies an update: a value equal to [`MASK`] keeps the current value of that name.
    pub fn merge_update(&self, update: BTreeMap<String, String>) -> SecretMap {
        let merged = update
            .into_iter()
            .map(|(name, value)| {
                let value = match (value == MASK, self.0.get(&name)) {
                    (true, Some(current)) => current.clone(),
                    _ => value,
                };
                (name, value)
            })
            .collect();
        SecretMap(merged)
    }
}

impl fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, MASK)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn debug_never_prints_values() {
        let secrets = SecretMap::new(map(&[("Authorization", "Bearer hunter2")]));
        let printed = format!("{secrets:?}");
        assert!(printed.contains("Authorization"));
        assert!(!printed.contains("hunter2"));
    }

    #[test]
    fn masked_values_keep_current_and_new_names_replace() {
        let current = SecretMap::new(map(&[("A", "one"), ("B", "two")]));
        let merged = current.merge_update(map(&[("A", MASK), ("C", "three")]));
        assert_eq!(merged.expose(), &map(&[("A", "one"), ("C", "three")]));
    }
}
