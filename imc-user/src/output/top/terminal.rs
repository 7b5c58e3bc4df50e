//! The one part of `imc top`'s view that touches the terminal: raw mode and the alternate
//! screen (given back on every way out, a panic included), the screen frames are drawn on, and
//! the key thread, which reads keys (crossterm's, or xterm's sequences it left unread) and
//! applies them with [`super::handle_key`].
use super::{Action, History, ViewConfig, ViewState, handle_key, render};
use crate::model::result::IntervalResult;
use crate::sys::tty::{Input, Tty};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::{cursor, execute, terminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// Everything one frame needs, shared by the loop's thread (new intervals) and the key thread
/// (sorting and scrolling between intervals).
pub struct Screen {
    term: Terminal<CrosstermBackend<std::io::Stdout>>,
    pub cfg: ViewConfig,
    pub history: History,
    pub last: Option<IntervalResult>,
    pub state: ViewState,
    /// When the last frame was drawn.
    pub drawn: Option<Instant>,
}

/// The shortest time between two frames drawn for new intervals.
pub const MIN_FRAME: Duration = Duration::from_millis(100);

impl Screen {
    /// A screen on standard output, nothing drawn yet.
    pub fn new(cfg: ViewConfig) -> std::io::Result<Screen> {
        Ok(Screen {
            term: Terminal::new(CrosstermBackend::new(std::io::stdout()))?,
            cfg,
            history: History::default(),
            last: None,
            state: ViewState::default(),
            drawn: None,
        })
    }

    /// One frame of what the screen holds now (an error once the terminal was given back).
    pub fn draw(&mut self) -> std::io::Result<()> {
        if !TERMINAL_OURS.load(Ordering::SeqCst) {
            // A panic elsewhere already gave the terminal back: drawing now would scribble on
            // the user's shell.
            return Err(std::io::Error::other("the full-screen view was closed"));
        }
        let Screen {
            term,
            cfg,
            history,
            last,
            state,
            drawn,
        } = self;
        state.log = crate::text::held_log::tail(3);
        term.draw(|f| {
            let area = f.area();
            render(cfg, history, last.as_ref(), state, area, f.buffer_mut());
        })?;
        *drawn = Some(Instant::now());
        Ok(())
    }
}

/// The screen, even after a panic while it was held (a panic while drawing leaves nothing
/// half-updated worth refusing over).
pub fn lock(screen: &Mutex<Screen>) -> MutexGuard<'_, Screen> {
    screen.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key thread's loop: reads the terminal until `stop` (or a quit key, which sets `quit`),
/// redrawing `screen` as keys ask; a terminal that went away sets `gone` and `quit`.
pub fn read_keys(
    tty: &Tty,
    screen: &Mutex<Screen>,
    quit: &AtomicBool,
    stop: &AtomicBool,
    gone: &AtomicBool,
) {
    let hang_up = || {
        // The terminal closed (its window, its tmux session): nobody is watching, so the run
        // ends, as it would on q.
        gone.store(true, Ordering::SeqCst);
        quit.store(true, Ordering::SeqCst);
    };
    let mut stuck = 0;
    while !stop.load(Ordering::SeqCst) {
        // Short waits, so dropping the view joins this thread promptly. The terminal is asked
        // first, level-triggered: crossterm's reader spins without end on a terminal that has
        // gone away, so it is only called on a live one.
        let ready = match tty.wait(Duration::from_millis(50)) {
            Ok(Input::Ready) => true,
            Ok(Input::Quiet) => false,
            Ok(Input::Gone) | Err(_) => return hang_up(),
        };
        // crossterm's queue: the keys just read, and resizes (which come by its own signal
        // pipe, not the terminal).
        let mut took = false;
        while matches!(event::poll(Duration::ZERO), Ok(true)) {
            let Ok(ev) = event::read() else {
                return hang_up();
            };
            took = true;
            if handle_event(screen, quit, ev) {
                return;
            }
        }
        stuck = if ready && !took { stuck + 1 } else { 0 };
        if stuck >= STUCK_TURNS {
            // crossterm reads the terminal only when its edge-triggered poll says so, and an
            // edge it took together with a resize can leave keys unread for good (a q lost
            // under load): read them here.
            stuck = 0;
            let mut buf = [0u8; 64];
            let n = match tty.read_waiting(&mut buf) {
                Ok(0) | Err(_) => return hang_up(),
                Ok(n) => n,
            };
            for ev in keys_of(&buf[..n]) {
                if handle_event(screen, quit, ev) {
                    return;
                }
            }
        } else if stuck > 0 {
            // Bytes crossterm did not take this time: wait rather than ask again at once.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Turns of bytes waiting that crossterm did not take before [`read_keys`] reads them itself.
const STUCK_TURNS: u32 = 3;

/// The keys the view answers to, from the terminal's bytes: printable characters, Ctrl-C, the
/// arrows and PgUp/PgDn (xterm's sequences); anything else is left out.
fn keys_of(bytes: &[u8]) -> Vec<Event> {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let key = |code| Event::Key(KeyEvent::new(code, KeyModifiers::NONE));
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let (ev, len) = match rest {
            [0x1b, b'[', b'A', ..] => (Some(key(KeyCode::Up)), 3),
            [0x1b, b'[', b'B', ..] => (Some(key(KeyCode::Down)), 3),
            [0x1b, b'[', b'5', b'~', ..] => (Some(key(KeyCode::PageUp)), 4),
            [0x1b, b'[', b'6', b'~', ..] => (Some(key(KeyCode::PageDown)), 4),
            [0x03, ..] => (
                Some(Event::Key(KeyEvent::new(
                    KeyCode::Char('c'),
                    KeyModifiers::CONTROL,
                ))),
                1,
            ),
            [c @ 0x20..=0x7e, ..] => (Some(key(KeyCode::Char(*c as char))), 1),
            _ => (None, 1),
        };
        out.extend(ev);
        i += len;
    }
    out
}

/// One terminal event: sorting, scrolling and resizing redraw; a quit key asks the loop to end
/// (true: stop reading keys).
fn handle_event(screen: &Mutex<Screen>, quit: &AtomicBool, ev: Event) -> bool {
    let mut s = lock(screen);
    let redraw = match ev {
        Event::Key(key) => {
            let Screen { cfg, state, .. } = &mut *s;
            match handle_key(state, cfg, key) {
                Action::Quit => {
                    // The loop asks at every drain (Sink::stop_requested) and ends then.
                    quit.store(true, Ordering::SeqCst);
                    return true;
                }
                Action::Redraw => true,
                Action::Ignore => false,
            }
        }
        Event::Resize(..) => true,
        _ => false,
    };
    if redraw {
        // A failed draw shows up at the next interval, which returns it as an error.
        let _ = s.draw();
    }
    false
}

/// Whether the terminal is in raw mode on the alternate screen because of us.
static TERMINAL_OURS: AtomicBool = AtomicBool::new(false);

/// Raw mode, alternate screen and hidden cursor, given back on every way out: by `LiveView`'s
/// drop (normal end, errors), by this guard if starting the view fails half-way, and by a panic
/// hook before the panic message prints.
pub struct RawMode {
    armed: bool,
}

impl RawMode {
    pub fn enter() -> std::io::Result<RawMode> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                give_back_terminal();
                previous(info);
            }));
        });
        // From here until the terminal is given back, `-v` log lines are held, not printed over
        // the view.
        crate::text::held_log::hold();
        terminal::enable_raw_mode()?;
        TERMINAL_OURS.store(true, Ordering::SeqCst);
        let guard = RawMode { armed: true };
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(guard)
    }

    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.armed {
            give_back_terminal();
        }
    }
}

/// Leaves raw mode and the alternate screen, if imc is in them, and prints the log lines held
/// meanwhile.
pub fn give_back_terminal() {
    if TERMINAL_OURS.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(
            std::io::stdout(),
            terminal::LeaveAlternateScreen,
            cursor::Show
        );
    }
    // The log lines held while the view was up, on the restored terminal.
    crate::text::held_log::release();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_left_behind_are_read_as_the_view_reads_them() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let k = |c| Event::Key(KeyEvent::new(c, KeyModifiers::NONE));
        assert_eq!(
            keys_of(b"rq\x1b[A\x1b[6~\x03\x07"),
            vec![
                k(KeyCode::Char('r')),
                k(KeyCode::Char('q')),
                k(KeyCode::Up),
                k(KeyCode::PageDown),
                Event::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            ]
        );
    }
}
