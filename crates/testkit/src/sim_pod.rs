//! One model-server pod for e2e tests: an `epp-sim` replica on its own runtime and thread (so killing it
//! closes its port and open connections, as a pod's container dying does), usually on its own loopback
//! address (127.0.0.2, .3, …) as pods are on their own IPs.

use std::net::SocketAddr;

/// A running replica; dropped, it is killed.
pub struct SimPod {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SimPod {
    /// Starts one replica with `options` (its first profile; `options.host` and `options.port` say where).
    pub fn start(options: epp_sim::ServeOptions) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let addrs = epp_sim::serve(options).await.map_err(|e| e.to_string());
                let started = addrs.as_ref().is_ok_and(|a| !a.is_empty());
                let _ = addr_tx.send(addrs);
                if started {
                    let _ = stopped.await;
                }
            });
        });
        let addrs = addr_rx.recv().expect("the replica's thread answers").expect("epp-sim starts");
        Self { addr: addrs[0], stop: Some(stop), thread: Some(thread) }
    }

    /// Kills the server: its runtime is dropped with every task, listener and connection.
    pub fn kill(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for SimPod {
    fn drop(&mut self) {
        self.kill();
    }
}
