//! scratch
use std::time::Instant;
#[test]
fn scratch_timing() {
    let d = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let s = imagefeed::corpus::generate(d.path(), 200, 1).unwrap();
    println!("generate 200: {:?} {:?}", t.elapsed(), s);
    let src = imagefeed::Source::from_list_file(&s.list).unwrap();
    for th in [1, 2] {
        let l = imagefeed::Loader::builder(src.clone()).batch_size(16).decode_threads(th).build().unwrap();
        let t = Instant::now();
        let n: usize = l.epoch(0).map(|b| b.unwrap().len()).sum();
        println!("epoch threads {th}: {n} in {:?}", t.elapsed());
    }
}
