//! Reading one scalar out of a JSON body by JSON pointer without building the whole
//! document: the parser walks the body once, skips everything off the path with
//! `IgnoredAny`, and allocates only the value it returns. (A full `serde_json::Value`
//! costs an allocation per key and value, on every delivery.)

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The string or integer at `pointer` (RFC 6901), as text; `None` if the body is not
/// JSON, the path does not exist, or the value is not a string or an integer.
pub fn scalar(body: &[u8], pointer: &str) -> Option<String> {
    let tokens: Vec<String> = if pointer.is_empty() {
        Vec::new()
    } else {
        pointer
            .strip_prefix('/')?
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Find(&tokens).deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

struct Find<'p>(&'p [String]);

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A map key, borrowed from the body when it has no escapes.
struct Key(bool);

struct KeyIs<'p>(&'p str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(Key(v == self.0))
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.is_empty().then(|| v.to_owned()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(self.0.is_empty().then(|| v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(self.0.is_empty().then(|| v.to_string()))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let want = self.0.first().map(String::as_str);
        while let Some(key) = map.next_key_seed(KeyIs(want.unwrap_or("\u{0}not a key")))? {
            // A key that repeats: the last one wins, as in serde_json, JavaScript and
            // Python, so the gateway reads the same ID as most handlers.
            if key.0 {
                found = map.next_value_seed(Find(&self.0[1..]))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let index = self.0.first().and_then(|t| t.parse::<usize>().ok());
        let mut found = None;
        let mut i = 0;
        loop {
            if Some(i) == index {
                match seq.next_element_seed(Find(&self.0[1..]))? {
                    Some(v) => found = v,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::scalar;

    #[test]
    fn pointers_agree_with_serde_json_value() {
        let body = br#"{"id":"evt_1","n":42,"neg":-3,"f":1.5,"b":true,"nil":null,"data":{"id":"inner","a/b":"slash","m~n":"tilde","list":[{"x":1},{"x":"two"}]},"esc\"aped":"q"}"#;
        for (ptr, want) in [
            ("/id", Some("evt_1")),
            ("/n", Some("42")),
            ("/neg", Some("-3")),
            ("/f", None),
            ("/b", None),
            ("/nil", None),
            ("/data", None),
            ("/data/id", Some("inner")),
            ("/data/a~1b", Some("slash")),
            ("/data/m~0n", Some("tilde")),
            ("/data/list/1/x", Some("two")),
            ("/data/list/0/x", Some("1")),
            ("/data/list/2/x", None),
            ("/missing", None),
            ("/esc\"aped", Some("q")),
        ] {
            assert_eq!(scalar(body, ptr).as_deref(), want, "{ptr}");
            let v: serde_json::Value = serde_json::from_slice(body).expect("json");
            let reference = v.pointer(ptr).and_then(|x| match x {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                _ => None,
            });
            assert_eq!(scalar(body, ptr), reference, "{ptr}");
        }
        assert_eq!(scalar(b"not json", "/id"), None);
        assert_eq!(scalar(br#"{"id":"x"} trailing"#, "/id"), None);
        assert_eq!(
            scalar(br#"{"id":"a","id":"b"}"#, "/id").as_deref(),
            Some("b")
        );
        assert_eq!(scalar(br#""top""#, "").as_deref(), Some("top"));
    }
}
