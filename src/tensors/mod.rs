//! Batches as the tensors of Rust training frameworks: candle here (feature `candle`); burn
//! through the `imagefeed-burn` crate, which builds on [`Batch::into_owned`](crate::Batch::into_owned).

#[cfg(feature = "candle")]
mod candle;
