//! Threads for the processes of one execution after another: a process
//! runs on an idle thread when there is one, on a new one otherwise, so
//! that the search does not start and join two threads per schedule.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

type Job = Box<dyn FnOnce() + Send>;

/// What an idle thread is given: a job, and where to say it is done.
type Work = (Job, Sender<()>);

/// The threads waiting for work.
static IDLE: Mutex<Vec<Sender<Work>>> = Mutex::new(Vec::new());

/// Run `job` on a thread of the pool; the receiver hears when it is done
/// (or its thread is gone).
pub(crate) fn run(job: impl FnOnce() + Send + 'static) -> Receiver<()> {
    let (done, finished) = channel();
    let mut work: Work = (Box::new(job), done);
    loop {
        let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let Some(thread) = idle else {
            spawn(work);
            return finished;
        };
        match thread.send(work) {
            Ok(()) => return finished,
            Err(back) => work = back.0,
        }
    }
}

fn spawn(first: Work) {
    let (tx, rx) = channel::<Work>();
    std::thread::spawn(move || {
        let mut work = first;
        loop {
            let (job, done) = work;
            job();
            IDLE.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(tx.clone());
            let _ = done.send(());
            match rx.recv() {
                Ok(next) => work = next,
                Err(_) => return,
            }
        }
    });
}
