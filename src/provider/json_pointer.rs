//! Reading scalars out of a JSON body by JSON pointer without building the whole
//! document: the parser walks the body once, skips everything off the paths with
//! `IgnoredAny`, and allocates only the values it returns. (A full `serde_json::Value`
//! costs an allocation per key and value, on every delivery.)
//!
//! A route's pointers are parsed once, when the config is loaded ([`Pointer`]), and
//! everything a delivery needs from its body is read in one walk ([`Pointers::read`]):
//! the walk is the largest part of a delivery's own work after the signature
//! (docs/performance.md).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON pointer (RFC 6901), split into its unescaped reference tokens once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    /// `None`: the text is not a pointer (it does not start with `/`), and finds
    /// nothing.
    tokens: Option<Vec<String>>,
}

impl Pointer {
    /// Parses a pointer; a string that is not one finds nothing.
    pub fn new(text: &str) -> Self {
        let tokens = if text.is_empty() {
            Some(Vec::new())
        } else {
            text.strip_prefix('/').map(|rest| {
                rest.split('/')
                    .map(|t| t.replace("~1", "/").replace("~0", "~"))
                    .collect()
            })
        };
        Self {
            text: text.to_owned(),
            tokens,
        }
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The string or integer it points at in `body`, as text (one walk; see [`scalar`]).
    pub fn read(&self, body: &[u8]) -> Option<String> {
        walk(body, std::slice::from_ref(self)).pop().flatten()
    }
}

impl From<&str> for Pointer {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for Pointer {
    fn from(text: String) -> Self {
        Self::new(&text)
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Pointers read together, in one walk over a body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pointers(Vec<Pointer>);

impl Pointers {
    /// Adds a pointer and returns its place in what [`read`](Self::read) returns; a
    /// pointer already in the set keeps its place (it is read once).
    pub fn add(&mut self, pointer: &Pointer) -> usize {
        if let Some(i) = self.0.iter().position(|p| p.text == pointer.text) {
            return i;
        }
        self.0.push(pointer.clone());
        self.0.len() - 1
    }

    /// Whether there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The scalar at each pointer, in the order they were added, in one walk over the
    /// body (each as [`scalar`] would read it alone). Without pointers the body is not
    /// walked and nothing is allocated.
    pub fn read(&self, body: &[u8]) -> Vec<Option<String>> {
        if self.0.is_empty() {
            return Vec::new();
        }
        walk(body, &self.0)
    }
}

/// The string or integer at `pointer` (RFC 6901), as text; `None` if the body is not
/// JSON, the path does not exist, or the value is not a string or an integer.
pub fn scalar(body: &[u8], pointer: &str) -> Option<String> {
    Pointer::new(pointer).read(body)
}

/// The scalars at several pointers, in one pass over the body: each as [`scalar`]
/// would read it alone (the last of repeated keys wins; `None` for all when the body
/// is not JSON).
pub fn scalars(body: &[u8], pointers: &[&str]) -> Vec<Option<String>> {
    let pointers: Vec<Pointer> = pointers.iter().map(|p| Pointer::new(p)).collect();
    walk(body, &pointers)
}

/// One walk over `body` reading every pointer of `pointers`.
fn walk(body: &[u8], pointers: &[Pointer]) -> Vec<Option<String>> {
    let none = || vec![None; pointers.len()];
    // A string that is not a pointer finds nothing; the others are still read.
    let paths: Vec<(usize, &[String])> = pointers
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.tokens.as_deref().map(|t| (i, t)))
        .collect();
    let out = std::cell::RefCell::new(none());
    let mut de = serde_json::Deserializer::from_slice(body);
    let find = Find {
        paths: &paths,
        out: &out,
    };
    if find.deserialize(&mut de).is_err() || de.end().is_err() {
        return none();
    }
    out.into_inner()
}

/// The paths still to follow at one place in the document: (pointer index, the
/// tokens left). Values found are written into `out` at their pointer's index.
struct Find<'p, 'o> {
    paths: &'p [(usize, &'p [String])],
    out: &'o std::cell::RefCell<Vec<Option<String>>>,
}

impl Find<'_, '_> {
    /// Arriving at a value: the pointers that end here read it (`None`: not a
    /// scalar), and those that go on below start again from nothing. A key that
    /// repeats is read anew each time, so its last occurrence decides, as when the
    /// pointers are read one by one.
    fn here(&self, value: impl Fn() -> Option<String>) {
        let mut out = self.out.borrow_mut();
        for (i, rest) in self.paths {
            out[*i] = if rest.is_empty() { value() } else { None };
        }
    }

    /// The paths that go on below the array index `index`.
    fn below(&self, index: usize) -> Vec<(usize, &[String])> {
        self.paths
            .iter()
            .filter(|(_, rest)| rest.first().and_then(|t| t.parse::<usize>().ok()) == Some(index))
            .map(|(i, rest)| (*i, &rest[1..]))
            .collect()
    }
}

impl<'de> DeserializeSeed<'de> for Find<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// A map key: which of the paths go on below it.
struct KeyOf<'a, 'p, 'o>(&'a Find<'p, 'o>);

impl<'de, 'a, 'p> DeserializeSeed<'de> for KeyOf<'a, 'p, '_> {
    type Value = Vec<(usize, &'p [String])>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'a, 'p> Visitor<'de> for KeyOf<'a, 'p, '_> {
    type Value = Vec<(usize, &'p [String])>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self
            .0
            .paths
            .iter()
            .filter(|(_, rest)| rest.first().is_some_and(|t| t == v))
            .map(|(i, rest)| (*i, &rest[1..]))
            .collect())
    }
}

impl<'de> Visitor<'de> for Find<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.here(|| Some(v.to_owned()));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.here(|| Some(v.to_string()));
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.here(|| Some(v.to_string()));
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.here(|| None);
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.here(|| None);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.here(|| None);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.here(|| None);
        // A key that repeats: the last one wins, as in serde_json, JavaScript and
        // Python, so the gateway reads the same values as most handlers.
        while let Some(below) = map.next_key_seed(KeyOf(&self))? {
            if below.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Find {
                    paths: &below,
                    out: self.out,
                })?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.here(|| None);
        let deeper = self.paths.iter().any(|(_, rest)| !rest.is_empty());
        let mut i = 0usize;
        loop {
            let below = if deeper { self.below(i) } else { Vec::new() };
            let more = if below.is_empty() {
                seq.next_element::<IgnoredAny>()?.is_some()
            } else {
                seq.next_element_seed(Find {
                    paths: &below,
                    out: self.out,
                })?
                .is_some()
            };
            if !more {
                break;
            }
            i += 1;
        }
        Ok(())
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

    #[test]
    fn several_pointers_in_one_pass_read_what_each_would_alone() {
        let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"customer":"cus_9","n":[1,{"k":"v"}]}},"type":"invoice.updated","list":[10,20,30]}"#;
        let pointers = [
            "/id",
            "/type",
            "/data/object/customer",
            "/data/object/n/1/k",
            "/data",
            "/list/2",
            "/list/01",
            "/missing",
            "not a pointer",
            "",
        ];
        let together = super::scalars(body, &pointers);
        for (p, got) in pointers.iter().zip(&together) {
            assert_eq!(got, &scalar(body, p), "{p}");
        }
        assert_eq!(
            together[1].as_deref(),
            Some("invoice.updated"),
            "the last key wins"
        );
        assert_eq!(together[5].as_deref(), Some("30"));
        assert_eq!(
            super::scalars(b"{\"id\":1} x", &["/id", "/type"]),
            [None, None]
        );
        // A key that repeats is read anew: its last occurrence decides, below it too.
        for (body, pointer) in [
            (&br#"{"data":{"id":"evt_A"},"data":null}"#[..], "/data/id"),
            (br#"{"a":{"b":"x"},"a":{}}"#, "/a/b"),
            (br#"{"a":{"b":"x"},"a":1}"#, "/a/b"),
            (br#"{"a":[{"b":"x"}],"a":[]}"#, "/a/0/b"),
        ] {
            assert_eq!(super::scalars(body, &[pointer]), [None], "{pointer}");
            assert_eq!(scalar(body, pointer), None, "{pointer}");
        }
        assert_eq!(
            super::scalars(br#"{"a":{"b":"x"},"a":{"b":"y"}}"#, &["/a/b"]),
            [Some("y".to_owned())]
        );
    }

    #[test]
    fn a_set_of_pointers_is_read_in_one_walk_each_once() {
        let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"k":"v"}}"#;
        let mut set = super::Pointers::default();
        assert!(set.is_empty());
        assert_eq!(set.read(body), Vec::<Option<String>>::new());
        let id = set.add(&"/id".into());
        let ty = set.add(&"/type".into());
        assert_eq!(
            set.add(&"/id".into()),
            id,
            "a pointer already added keeps its place"
        );
        let k = set.add(&super::Pointer::new("/data/k"));
        let read = set.read(body);
        assert_eq!(read.len(), 3);
        assert_eq!(read[id].as_deref(), Some("evt_1"));
        assert_eq!(read[ty].as_deref(), Some("invoice.paid"));
        assert_eq!(read[k].as_deref(), Some("v"));
        assert_eq!(set.read(b"not json"), [None, None, None]);
        let p = super::Pointer::new("/a~1b");
        assert_eq!(p.to_string(), "/a~1b");
        assert_eq!(p.read(br#"{"a/b":7}"#).as_deref(), Some("7"));
        assert_eq!(super::Pointer::new("nope").read(br#"{"nope":1}"#), None);
    }
}
