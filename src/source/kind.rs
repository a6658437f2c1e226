//! [`SourceKind`]: how a source's samples are stored.

/// How a source's samples are stored, as [`Source::kind`](crate::Source::kind) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceKind {
    /// One local file a sample (a file list, a folder of class folders, entries).
    Files,
    /// One object a sample in object storage (`s3://bucket/prefix` of images or a list there).
    Objects,
    /// Samples packed in tar shards (WebDataset layout), local or in object storage, each shard
    /// read as one sequential stream.
    TarShards,
    /// `tf.train.Example` records in TFRecord shards, each shard read as one stream.
    TfRecord,
    /// Rows of parquet files (the Hugging Face `datasets` layout), each row group read as one
    /// stream.
    Parquet,
    /// A mixture of sources in set proportions ([`Mix`](crate::Mix)).
    Mixture,
}
