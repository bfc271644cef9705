fn main() { println!("fused-verify: skeleton"); }
