//! One client connection reading a resumable stream's log: the first request's body, and
//! every reconnect's.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;

use super::log::{AttachError, Next};
use super::Stream;

/// A client's body over a stream's log, from one event on. Dropping it (the client went
/// away) detaches it; the generation runs on.
pub(crate) struct Reader {
    stream: Arc<Stream>,
    id: u64,
    done: bool,
}

impl Reader {
    /// A reader from event `from_seq` on.
    pub(crate) fn attach(stream: Arc<Stream>, from_seq: u64) -> Result<Self, AttachError> {
        let id = stream.attach(from_seq)?;
        Ok(Reader {
            stream,
            id,
            done: false,
        })
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.stream.next(self.id, cx.waker()) {
            Next::Event(b) | Next::Ping(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Next::End => {
                self.done = true;
                Poll::Ready(None)
            }
            Next::Wait => Poll::Pending,
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.done
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stream.detach(self.id);
    }
}
