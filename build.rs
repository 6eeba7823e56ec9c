//! Generates the gRPC messages, server and client from `proto/` (see `src/grpc.rs`).
//! protox parses the .proto in Rust, so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["mcp_pool/v1/pool.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
