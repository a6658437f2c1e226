//! Makes the example find libtorch when it runs: torch-sys reports the folder it linked
//! against (`DEP_TCH_LIBTORCH_LIB`), which becomes the binary's run path.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
