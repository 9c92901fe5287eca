//! JSON read strictly: where a type expects an object (a struct, a struct variant), only a JSON
//! object is taken, at every depth.
//!
//! serde's derived `Deserialize` for a struct also accepts a *sequence*, taking the fields in
//! order, so `{"event": ["x.y", {"k": 1}, null, "arr-id-1"]}` reads as an event named `x.y` with
//! the id `arr-id-1`. No request body or endpoint answer means that. [`Strict`] wraps any
//! [`Deserializer`] and forwards every call, except that a struct is read as a map (so a
//! sequence is refused with serde's "invalid type: sequence, expected …"), and it wraps every
//! deserializer it hands on (an option's content, a newtype's, each element of a sequence, each
//! key and value of a map, each enum variant's content), so the rule holds all the way down.
//! A struct variant refuses a sequence too.
//!
//! [`from_slice`] and [`from_value`] are `serde_json`'s functions with the rule applied; every
//! JSON request body ([`crate::http::body`]) and every endpoint answer read into a Rust type goes
//! through one of them.
//!
//! **Limit.** serde's buffered forms — `#[serde(untagged)]`, internally tagged enums
//! (`#[serde(tag = "…")]`) and `#[serde(flatten)]` — first copy the input into serde's private
//! buffer and read the type from that, out of the adapter's reach. Types read through this module
//! therefore do not use them: `DelaySpec` (`crate::http::trigger`) picks its form from a
//! `Value` and reads the object form through [`from_value`], and the Trigger.dev v2
//! `RunJobResponse` is externally tagged for the read (`crate::endpoints::trigger_dev_v2`).

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    Unexpected, VariantAccess, Visitor,
};
use serde_json::Value;

/// Reads `T` from JSON bytes with the object rule (see the module docs).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(Strict(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Reads `T` from a JSON value with the object rule (see the module docs).
pub fn from_value<T: DeserializeOwned>(value: Value) -> serde_json::Result<T> {
    T::deserialize(Strict(value))
}

/// A [`Deserializer`] that reads structs from objects only, at every depth.
#[derive(Debug, Clone, Copy)]
pub struct Strict<D>(pub D);

/// Forwards `deserialize_*` methods to the inner deserializer with the visitor wrapped.
macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method(Wrap::new(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Wrap::new(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Wrap::new(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Wrap::new(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Wrap::new(visitor))
    }

    /// The one change: a struct is read as a map, and its visitor refuses a sequence.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(Wrap::object(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Wrap::new(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor passing on what it is given, with every deserializer and access in it wrapped.
/// `object_only`: a sequence is refused (the visitor of a struct or a struct variant).
struct Wrap<V> {
    inner: V,
    object_only: bool,
}

impl<V> Wrap<V> {
    fn new(inner: V) -> Self {
        Self {
            inner,
            object_only: false,
        }
    }

    fn object(inner: V) -> Self {
        Self {
            inner,
            object_only: true,
        }
    }
}

/// Forwards `visit_*` methods that carry a plain value.
macro_rules! visit {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.object_only {
            f.write_str("a JSON object (")?;
            self.inner.expecting(f)?;
            f.write_str(")")
        } else {
            self.inner.expecting(f)
        }
    }

    visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Strict(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Strict(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        if self.object_only {
            return Err(de::Error::invalid_type(Unexpected::Seq, &self));
        }
        self.inner.visit_seq(Strict(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Strict(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(Strict(data))
    }
}

/// A seed whose deserializer is wrapped.
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Strict(d))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Strict<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Strict<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Seed(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Strict<A> {
    type Error = A::Error;
    type Variant = Strict<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(Seed(seed))
            .map(|(value, variant)| (value, Strict(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Strict<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap::new(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Wrap::object(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::HashMap;

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    struct Inner {
        k: u32,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Outer {
        name: String,
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        by_key: HashMap<String, Inner>,
        #[serde(default)]
        choice: Option<Choice>,
        #[serde(default)]
        wrapped: Option<Newtype>,
        #[serde(default)]
        payload: Value,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Newtype(Inner);

    #[derive(Debug, Clone, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Choice {
        Plain,
        Boxed(Inner),
        Pair(u32, u32),
        Shaped { k: u32 },
    }

    fn both(text: &str) -> [serde_json::Result<Outer>; 2] {
        let value: Value = serde_json::from_str(text).expect("json");
        [from_slice(text.as_bytes()), from_value(value)]
    }

    #[test]
    fn objects_read_as_before() {
        let text = r#"{"name": "a", "inner": {"k": 1}, "list": [{"k": 2}], "byKey": {"x": {"k": 3}},
            "choice": {"shaped": {"k": 4}}, "wrapped": {"k": 5}, "payload": [1, {"a": [2]}]}"#;
        for read in both(text) {
            let outer = read.expect("reads");
            assert_eq!(outer.inner, Some(Inner { k: 1 }));
            assert_eq!(outer.list, [Inner { k: 2 }]);
            assert_eq!(outer.by_key["x"], Inner { k: 3 });
            assert_eq!(outer.choice, Some(Choice::Shaped { k: 4 }));
            assert_eq!(outer.wrapped, Some(Newtype(Inner { k: 5 })));
            assert_eq!(
                outer.payload,
                json!([1, {"a": [2]}]),
                "any JSON stays any JSON"
            );
        }
        for (text, choice) in [
            (r#"{"name": "a", "choice": "plain"}"#, Choice::Plain),
            (
                r#"{"name": "a", "choice": {"boxed": {"k": 6}}}"#,
                Choice::Boxed(Inner { k: 6 }),
            ),
            (
                r#"{"name": "a", "choice": {"pair": [7, 8]}}"#,
                Choice::Pair(7, 8),
            ),
        ] {
            for read in both(text) {
                assert_eq!(read.expect(text).choice, Some(choice.clone()));
            }
        }
    }

    #[test]
    fn a_sequence_in_place_of_an_object_is_refused_at_every_depth() {
        for text in [
            r#"["a"]"#,
            r#"{"name": "a", "inner": [1]}"#,
            r#"{"name": "a", "list": [[2]]}"#,
            r#"{"name": "a", "byKey": {"x": [3]}}"#,
            r#"{"name": "a", "choice": {"shaped": [4]}}"#,
            r#"{"name": "a", "choice": {"boxed": [6]}}"#,
            r#"{"name": "a", "wrapped": [5]}"#,
        ] {
            for read in both(text) {
                let e = read.expect_err(text).to_string();
                // serde_json's `Value` refuses a sequence for a struct variant itself ("expected
                // struct variant"); everywhere else the adapter says what it wanted.
                assert!(
                    e.contains("invalid type: sequence, expected a JSON object")
                        || e.contains("invalid type: sequence, expected struct variant"),
                    "{text}: {e}"
                );
            }
        }
        // What serde_json alone does, for contrast.
        let lenient: Outer = serde_json::from_str(r#"{"name": "a", "inner": [1]}"#).expect("reads");
        assert_eq!(lenient.inner, Some(Inner { k: 1 }));
    }

    #[test]
    fn trailing_input_and_syntax_errors_stay_errors() {
        assert!(from_slice::<Inner>(br#"{"k": 1} x"#).is_err());
        assert!(from_slice::<Inner>(br#"{"k": 1"#).is_err());
        assert_eq!(
            from_slice::<Inner>(br#" {"k": 1} "#).expect("ok"),
            Inner { k: 1 }
        );
    }
}
