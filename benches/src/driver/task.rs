//! A connection task's life: connecting, joining its members, and its main loop.

use super::*;

impl ConnTask {
    pub(super) async fn run(mut self) {
        let mut restart_down = None;
        loop {
            if let Some(down) = restart_down.take() {
                tokio::select! {
                    () = self.shared.stop.cancelled() => break,
                    () = tokio::time::sleep(down) => {}
                }
            }
            let Some(framed) = self.open().await else {
                break;
            };
            match self.serve(framed).await {
                Exit::Stop | Exit::Closed => break,
                Exit::Restart(down) => restart_down = Some(down),
            }
        }
        self.flush_samples();
    }

    /// Connects and handshakes, retrying a few times.
    pub(super) async fn open(&mut self) -> Option<Transport> {
        let permits = self.shared.connect_permits.clone();
        let _permit = tokio::select! {
            () = self.shared.stop.cancelled() => return None,
            p = permits.acquire_owned() => p.ok()?,
        };
        let mut last_error = String::new();
        for attempt in 0..CONNECT_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            if self.shared.stop.is_cancelled() {
                return None;
            }
            match connect(&self.endpoint, self.shared.batch).await {
                Ok((framed, max_frame_size)) => {
                    inc(&self.shared.counters.conns_ready);
                    self.max_frame_size = max_frame_size;
                    return Some(framed);
                }
                Err(e) => last_error = e,
            }
        }
        if self
            .shared
            .counters
            .conns_failed
            .fetch_add(1, Ordering::Relaxed)
            < 5
        {
            eprintln!(
                "connection {} to {} failed: {last_error}",
                self.key, self.endpoint.addr
            );
        }
        None
    }

    pub(super) async fn serve(&mut self, mut framed: Transport) -> Exit {
        self.pending.clear();
        self.timers.clear();
        self.rounds_outstanding = 0;
        self.joins_waiting = self
            .members
            .iter()
            .filter(|m| m.phase == Phase::Unjoined)
            .count();
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        let mut armed_for: Option<Instant> = None;
        loop {
            let next_timer = match (
                self.timers.peek().map(|t| t.0 .0),
                self.delayed_acks.front().map(|a| a.0),
            ) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if next_timer != armed_for {
                if let Some(at) = next_timer {
                    sleep.as_mut().reset(tokio::time::Instant::from_std(at));
                }
                armed_for = next_timer;
            }
            // A connection of late members waits for the second wave.
            let go = if self.members.first().is_some_and(|m| m.spec.late) {
                &self.shared.late_go
            } else {
                &self.shared.join_go
            };
            let may_join = self.joins_waiting > 0 && go.is_cancelled();
            let permits = self.shared.join_permits.clone();
            // Biased so that a flood of answers (closed loop) cannot starve the joins
            // still to send; timers fire after every wake whichever branch woke it.
            tokio::select! {
                biased;
                () = self.shared.stop.cancelled() => return Exit::Stop,
                cmd = self.commands.recv() => {
                    if let Some(cmd) = cmd {
                        if let Some(exit) = self.on_command(cmd) {
                            return exit;
                        }
                    }
                }
                () = go.cancelled(), if self.joins_waiting > 0 && !may_join => {}
                permit = permits.acquire_owned(), if may_join => {
                    if let Ok(permit) = permit {
                        self.send_join(permit);
                    }
                }
                frame = framed.next() => {
                    match frame {
                        Some(Ok(frame)) => self.on_frame(frame),
                        Some(Err(_)) | None => {
                            inc(&self.shared.counters.conns_lost);
                            return Exit::Closed;
                        }
                    }
                    // Take every frame already buffered before writing anything.
                    for _ in 0..1024 {
                        match framed.next().now_or_never() {
                            Some(Some(Ok(frame))) => self.on_frame(frame),
                            Some(Some(Err(_)) | None) => {
                                inc(&self.shared.counters.conns_lost);
                                return Exit::Closed;
                            }
                            None => break,
                        }
                    }
                }
                () = &mut sleep, if armed_for.is_some() => {
                    armed_for = None;
                }
            }
            let now = Instant::now();
            self.fire_timers(now);
            self.send_due_acks(now);
            if !self.outbox.is_empty() {
                let mut failed = false;
                for frame in self.outbox.drain(..) {
                    if framed.feed(frame).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || SinkExt::<Frame>::flush(&mut framed).await.is_err() {
                    inc(&self.shared.counters.conns_lost);
                    return Exit::Closed;
                }
            }
        }
    }
}
