//! `tf.train.Example` decoded by prost, the reference the TFRecord walker is compared with: the
//! tests below, and the `tfrecord` fuzz target, which includes this file (`#[path]`) and
//! compares the two on every record its inputs frame.
//!
//! Protobuf's rules that the walker must follow as prost does: unknown fields skipped, a
//! message met twice merged (so two encodings concatenated decode as their merge), a later map
//! entry with the same key replacing the earlier one, a oneof switched to another field
//! starting over, packed and unpacked numbers both read.

use std::collections::HashMap;

use imagefeed::tools::fuzz::{walk_example, ExampleFeature};

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Example {
    #[prost(message, optional, tag = "1")]
    pub(crate) features: Option<Features>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Features {
    #[prost(map = "string, message", tag = "1")]
    pub(crate) feature: HashMap<String, Feature>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Feature {
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub(crate) kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
#[allow(clippy::enum_variant_names)] // tensorflow/core/example/feature.proto's names
pub(crate) enum Kind {
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BytesList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub(crate) value: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FloatList {
    #[prost(float, repeated, tag = "1")]
    pub(crate) value: Vec<f32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub(crate) value: Vec<i64>,
}

/// The keys compared: the ones the loader looks for by default, and others.
pub(crate) const KEYS: [&str; 6] = [
    "image/encoded",
    "image",
    "image/class/label",
    "label",
    "image/format",
    "",
];

/// What prost makes of `payload` for each of `keys`, in the walker's terms; `None` where prost
/// refuses the payload.
pub(crate) fn reference(payload: &[u8], keys: &[&str]) -> Option<Vec<Option<ExampleFeature>>> {
    let example = <Example as prost::Message>::decode(payload).ok()?;
    let map = example.features.map(|f| f.feature).unwrap_or_default();
    let seen = |f: &Feature| match &f.kind {
        None => ExampleFeature {
            kind: 0,
            count: 0,
            first_bytes: None,
            first_int: None,
        },
        Some(Kind::BytesList(l)) => ExampleFeature {
            kind: 1,
            count: l.value.len() as u64,
            first_bytes: l.value.first().cloned(),
            first_int: None,
        },
        Some(Kind::FloatList(l)) => ExampleFeature {
            kind: 2,
            count: l.value.len() as u64,
            first_bytes: None,
            first_int: None,
        },
        Some(Kind::Int64List(l)) => ExampleFeature {
            kind: 3,
            count: l.value.len() as u64,
            first_bytes: None,
            first_int: l.value.first().copied(),
        },
    };
    Some(keys.iter().map(|k| map.get(*k).map(seen)).collect())
}

/// Walks `payload` with imagefeed's walker and decodes it with prost. Where prost decodes it,
/// the walker must too, with the same features; where prost refuses it the walker may be more
/// lenient (a key over 1,024 bytes is skipped without its UTF-8 checked, and groups are counted
/// per message rather than over the whole nesting). Returns whether prost decoded it; panics on
/// a disagreement.
pub(crate) fn compare(payload: &[u8]) -> bool {
    let ours = walk_example(payload, &KEYS);
    let Some(theirs) = reference(payload, &KEYS) else {
        return false;
    };
    match ours {
        Ok(ours) => assert_eq!(
            ours, theirs,
            "the walker and prost disagree on {payload:02x?}"
        ),
        Err(why) => panic!("prost decodes {payload:02x?}, the walker refuses it: {why}"),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{field, varint};
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = Option<Kind>> {
        let bytes = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..4);
        prop_oneof![
            Just(None),
            bytes.prop_map(|value| Some(Kind::BytesList(BytesList { value }))),
            prop::collection::vec(any::<f32>(), 0..5)
                .prop_map(|value| Some(Kind::FloatList(FloatList { value }))),
            prop::collection::vec(any::<i64>(), 0..5)
                .prop_map(|value| Some(Kind::Int64List(Int64List { value }))),
        ]
    }

    fn example() -> impl Strategy<Value = Example> {
        let key = prop_oneof![
            prop::sample::select(KEYS.to_vec()).prop_map(str::to_string),
            "[a-z/]{0,12}",
        ];
        prop::option::weighted(
            0.95,
            prop::collection::hash_map(key, kind().prop_map(|kind| Feature { kind }), 0..7),
        )
        .prop_map(|map| Example {
            features: map.map(|feature| Features { feature }),
        })
    }

    fn encode(e: &Example) -> Vec<u8> {
        prost::Message::encode_to_vec(e)
    }

    /// An `Example` of one feature whose message is `feature`.
    fn example_of(key: &str, feature: &[u8]) -> Vec<u8> {
        let (mut entry, mut map, mut example) = (vec![], vec![], vec![]);
        field(&mut entry, 1, key.as_bytes());
        field(&mut entry, 2, feature);
        field(&mut map, 1, &entry);
        field(&mut example, 1, &map);
        example
    }

    /// An int64 list's numbers one field each (prost writes them packed).
    fn unpacked(numbers: &[i64]) -> Vec<u8> {
        let mut list = Vec::new();
        for &n in numbers {
            varint(&mut list, 1 << 3);
            varint(&mut list, n as u64);
        }
        let mut feature = Vec::new();
        field(&mut feature, 3, &list);
        feature
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_walker_reads_what_prost_writes(e in example()) {
            prop_assert!(compare(&encode(&e)));
        }

        #[test]
        fn two_examples_concatenated_read_as_their_merge(a in example(), b in example()) {
            // Protobuf: the concatenation decodes as the merge (later keys replace earlier
            // ones; a feature's list met twice appends).
            let mut both = encode(&a);
            both.extend(encode(&b));
            prop_assert!(compare(&both));
            // Unknown fields between them (a varint, a 64-bit, a length-delimited and a group).
            let mut spliced = encode(&a);
            spliced.extend([0x78, 0x05, 0x81, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0x8A, 0x01, 2, 0, 0]);
            spliced.extend([0xA3, 0x06, 0x08, 0x01, 0xA4, 0x06]);
            spliced.extend(encode(&b));
            prop_assert!(compare(&spliced));
        }

        #[test]
        fn every_answer_prost_gives_on_changed_bytes_the_walker_gives_too(
            e in example(),
            changes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = encode(&e);
            if bytes.is_empty() {
                return Ok(());
            }
            for (at, b) in changes {
                let at = at.index(bytes.len());
                bytes[at] = b;
            }
            compare(&bytes);
            bytes.truncate(bytes.len() / 2);
            compare(&bytes);
        }

        #[test]
        fn unpacked_and_packed_numbers_read_alike(numbers in prop::collection::vec(any::<i64>(), 0..5)) {
            prop_assert!(compare(&example_of("label", &unpacked(&numbers))));
        }
    }

    #[test]
    fn a_oneof_switched_to_another_list_starts_over_and_a_list_met_twice_appends() {
        let mut bytes_list = Vec::new();
        field(&mut bytes_list, 1, b"7");
        let mut bytes_feature = Vec::new();
        field(&mut bytes_feature, 1, &bytes_list);
        // One Feature holding a bytes list, then an int64 list: the int64 list alone.
        let switched = [bytes_feature.clone(), unpacked(&[3, 4])].concat();
        let e = example_of("label", &switched);
        assert!(compare(&e));
        let ours = walk_example(&e, &["label"]).unwrap();
        assert_eq!(ours[0].as_ref().map(|f| (f.kind, f.count)), Some((3, 2)));
        // The same list twice: its values appended, the first value the first list's.
        let twice = [unpacked(&[5]), unpacked(&[6, 7])].concat();
        let e = example_of("label", &twice);
        assert!(compare(&e));
        let ours = walk_example(&e, &["label"]).unwrap();
        let f = ours[0].as_ref().unwrap();
        assert_eq!((f.kind, f.count, f.first_int), (3, 3, Some(5)));
        // A second entry of the same key replaces the first.
        let e = [
            example_of("label", &bytes_feature),
            example_of("label", &unpacked(&[9])),
        ];
        assert!(compare(&e.concat()));
    }
}
