//! `mcp-pool-egress PORT SOCKET -- COMMAND [ARGS…]`: the egress forwarder inside a stdio
//! server's sandbox (network `egress`). It listens on `127.0.0.1:PORT` of the sandbox's
//! own network (what `HTTP_PROXY` names there), then forks: the parent becomes COMMAND
//! (the server, so it keeps its place under bubblewrap), the child forwards every
//! connection to the service's egress proxy at the Unix socket SOCKET. The listener is
//! bound before the server starts, so its first request finds it; the child ends with
//! the sandbox's pid namespace when the server exits.
//!
//! The standard library and libc's `fork` and `prctl` only: it starts with every such server, so it
//! must start fast and hold little.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(port), Some(socket), Some("--")) = (
        args.first().and_then(|p| p.parse::<u16>().ok()),
        args.get(1).cloned(),
        args.get(2).map(String::as_str),
    ) else {
        eprintln!("usage: mcp-pool-egress PORT SOCKET -- COMMAND [ARGS...]");
        std::process::exit(2);
    };
    let Some(program) = args.get(3) else {
        eprintln!("mcp-pool-egress: no command to run");
        std::process::exit(2);
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("mcp-pool-egress: cannot listen on 127.0.0.1:{port}: {error}");
            std::process::exit(1);
        }
    };
    let parent = std::process::id() as i32;
    // SAFETY: one thread so far; the child only runs the forwarding loop below.
    match unsafe { libc_fork() } {
        0 => {
            // Gone with the server even outside a pid namespace of its own.
            // SAFETY: plain system calls on this process.
            unsafe {
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if getppid() != parent {
                    std::process::exit(0);
                }
            }
            forward(listener, &socket)
        }
        pid if pid > 0 => {
            drop(listener);
            let error = std::process::Command::new(program).args(&args[4..]).exec();
            eprintln!("mcp-pool-egress: cannot run {program}: {error}");
            std::process::exit(127);
        }
        _ => {
            eprintln!(
                "mcp-pool-egress: fork failed: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(1);
        }
    }
}

unsafe extern "C" {
    #[link_name = "fork"]
    fn libc_fork() -> i32;
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn getppid() -> i32;
}

const PR_SET_PDEATHSIG: i32 = 1;
const SIGKILL: u64 = 9;

/// Accepts forever; each connection is piped both ways to a fresh connection to the proxy.
fn forward(listener: TcpListener, socket: &str) -> ! {
    for client in listener.incoming().flatten() {
        let socket = socket.to_owned();
        std::thread::spawn(move || {
            if let Ok(proxy) = UnixStream::connect(&socket) {
                pipe(client, proxy);
            }
        });
    }
    std::process::exit(0)
}

fn pipe(client: TcpStream, proxy: UnixStream) {
    let (Ok(mut client_in), Ok(mut proxy_in)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let (mut client_out, mut proxy_out) = (client, proxy);
    let upstream = std::thread::spawn(move || {
        copy(&mut client_in, &mut proxy_out);
        let _ = proxy_out.shutdown(Shutdown::Write);
    });
    copy(&mut proxy_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 || to.write_all(&buffer[..read]).is_err() {
            return;
        }
    }
}
