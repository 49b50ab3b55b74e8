//! The `tenantd` command: parse the command line, set up logging, hand over to the library.

use std::process::ExitCode;

use tenantd::config::{self, Command, ConfigError, ServeConfig};

fn main() -> ExitCode {
    // tokio-postgres logs every statement's parameters at debug, and a copy's parameters hold
    // tenant tokens (in the idempotency records) and token hashes: it logs at info at most,
    // whatever RUST_LOG says.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .filter_module("tokio_postgres", log::LevelFilter::Info)
        .init();
    let command = match config::parse(std::env::args_os().skip(1), |name| std::env::var_os(name)) {
        Ok(command) => command,
        Err(ConfigError::Shown(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(ConfigError::Invalid(text)) => {
            eprint!("{text}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Serve(config) => serve(*config),
        Command::AuditVerify { db } => verify(&db),
        Command::Copy { from, to } => {
            match tenantd::copy(&from, &to, |step| eprintln!("tenantd copy: {step}")) {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tenantd copy: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Backup { db, to } => match tenantd::backup(&db, &to) {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tenantd backup: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn serve(config: ServeConfig) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.limits.workers)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tenantd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // The handlers are in place before the "listening on" line: a SIGTERM sent as soon as
        // it is read stops the server gracefully rather than by the signal's default action.
        let shutdown = shutdown_signal();
        let listener = listen(config.listen).map_err(|e| cannot_listen(config.listen, &e))?;
        tenantd::run(listener, config, shutdown).await
    });
    match result {
        Ok(()) => {
            log::info!("stopped");
            ExitCode::SUCCESS
        }
        // Said once: the log goes to stderr too, so logging it as well would say it twice.
        Err(e) => {
            eprintln!("tenantd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why `serve` cannot listen on `addr`, naming what to do when the address is taken.
fn cannot_listen(addr: std::net::SocketAddr, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "cannot listen on {addr}: the address is already in use (another process listens \
             there; choose another with --listen)"
        )
    } else {
        format!("cannot listen on {addr}: {e}")
    }
}

/// Connections the kernel queues for `accept`: a burst beyond the connections being served
/// waits here instead of being dropped (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 1024;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Resolves at the first SIGINT or SIGTERM. The handlers are installed when this is called,
/// not when the future is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT can be handled");
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM can be handled");
    async move {
        tokio::select! {
            _ = interrupt.recv() => log::info!("SIGINT received"),
            _ = terminate.recv() => log::info!("SIGTERM received"),
        }
    }
}

fn verify(path: &std::path::Path) -> ExitCode {
    match tenantd::audit_verify(path) {
        Ok(verified) => {
            if verified.pending > 0 {
                eprintln!(
                    "tenantd audit verify: {} of the {} events were still waiting for their \
                     place in the chain (audit_pending); they were checked after it, in the \
                     order the instances will link them",
                    verified.pending, verified.events
                );
            }
            println!("ok: {} events, head {}", verified.events, verified.head);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenantd audit verify: {e}");
            match e {
                // A database that is not there is a mistake in the command line, which exits 2
                // as a bad flag does.
                tenantd::AuditVerifyError::NoDatabase(_) => ExitCode::from(2),
                tenantd::AuditVerifyError::Failed(_) => ExitCode::FAILURE,
            }
        }
    }
}
