//! Drawing a sample: as plain text (`--once`) and as a live terminal view.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use atoll_proto::boot::InstanceStatus;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;

use super::model::{self, ClientOrder, ClientRow, DirRow, Sample, ServerRow};

const SERVER_HEADER: [&str; 9] = [
    "server",
    "core",
    "ops/s",
    "busy%",
    "ring B",
    "lanes",
    "blocks",
    "restarts",
    "busiest ops",
];
const CLIENT_HEADER: [&str; 6] = ["pid", "session", "command", "ops/s", "traps/s", "hit%"];
const DIR_HEADER: [&str; 5] = ["inode", "spread", "ops/s", "servers", "directory"];

fn server_cells(s: &ServerRow) -> [String; 9] {
    let ops = s
        .top_ops
        .iter()
        .map(|(n, r)| format!("{n} {r:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    [
        s.server.to_string(),
        if s.core < 0 {
            "-".into()
        } else {
            s.core.to_string()
        },
        format!("{:.0}", s.ops_per_s),
        format!("{:.1}", s.busy_pct),
        s.ring_bytes.to_string(),
        s.channels.to_string(),
        format!("{}/{}", s.blocks_used, s.blocks_total),
        s.restarts.to_string(),
        ops,
    ]
}

fn client_cells(c: &ClientRow) -> [String; 6] {
    [
        if c.pid == 0 {
            "?".into()
        } else {
            c.pid.to_string()
        },
        c.session.to_string(),
        c.command.clone(),
        format!("{:.0}", c.ops_per_s),
        format!("{:.0}", c.traps_per_s),
        c.dcache_hit_pct.map_or("-".into(), |p| format!("{p:.1}")),
    ]
}

fn dir_cells(d: &DirRow) -> [String; 5] {
    [
        d.ino.to_string(),
        if d.distributed { "yes" } else { "no" }.into(),
        format!("{:.0}", d.ops_per_s),
        d.servers
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        if d.path.is_empty() {
            "?".into()
        } else {
            d.path.clone()
        },
    ]
}

fn summary(s: &Sample) -> String {
    let mut line = format!(
        "instance {}  mount {}  wait {}  servers {}  clients {}  interval {:.2}s",
        s.id,
        s.mount,
        s.poll,
        s.servers.len(),
        s.clients.len(),
        s.interval_s
    );
    line.push('\n');
    for (name, used, limit) in &s.limits {
        let _ = write!(line, "{name} {used}/{limit}  ");
    }
    line.trim_end().to_string()
}

/// Columns padded to their widest cell.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The sample as plain text (what `--once` prints).
pub fn text(s: &Sample, order: ClientOrder, filter: &str) -> String {
    let mut out = summary(s);
    out.push_str("\n\n");
    let mut rows = vec![SERVER_HEADER
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()];
    rows.extend(s.servers.iter().map(|r| server_cells(r).to_vec()));
    out.push_str(&columns(&rows));
    out.push('\n');
    let mut rows = vec![CLIENT_HEADER
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()];
    rows.extend(
        model::clients_view(s, order, filter)
            .into_iter()
            .map(|c| client_cells(c).to_vec()),
    );
    out.push_str(&columns(&rows));
    out.push('\n');
    let mut rows = vec![DIR_HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    rows.extend(s.dirs.iter().map(|d| dir_cells(d).to_vec()));
    out.push_str(&columns(&rows));
    out
}

/// What the interactive view remembers between frames.
struct Ui {
    order: ClientOrder,
    filter: String,
    editing: bool,
    paused: bool,
}

fn draw(f: &mut Frame<'_>, s: &Sample, ui: &Ui) {
    // The directory pane keeps room for a few rows even when idle, so
    // the layout does not jump when a directory gets busy.
    let dir_rows = s.dirs.len().clamp(3, model::MAX_DIRS) as u16;
    let [head, servers, clients, dirs, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(s.servers.len() as u16 + 3),
        Constraint::Min(3),
        Constraint::Length(dir_rows + 3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(summary(s)), head);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let widths = [4, 4, 8, 6, 7, 5, 13, 8, 40].map(Constraint::Min);
    let table = Table::new(s.servers.iter().map(|r| Row::new(server_cells(r))), widths)
        .header(Row::new(SERVER_HEADER).style(bold))
        .block(Block::bordered().title(" servers "));
    f.render_widget(table, servers);
    let rows = model::clients_view(s, ui.order, &ui.filter);
    let title = format!(
        " client processes ({} shown, by {}{}) ",
        rows.len(),
        ui.order.name(),
        if ui.filter.is_empty() {
            String::new()
        } else {
            format!(", filter \"{}\"", ui.filter)
        }
    );
    let widths = [8, 8, 16, 8, 8, 6].map(Constraint::Min);
    let table = Table::new(rows.into_iter().map(|c| Row::new(client_cells(c))), widths)
        .header(Row::new(CLIENT_HEADER).style(bold))
        .block(Block::bordered().title(title));
    f.render_widget(table, clients);
    let widths = [20, 6, 8, 8, 40].map(Constraint::Min);
    let table = Table::new(s.dirs.iter().map(|d| Row::new(dir_cells(d))), widths)
        .header(Row::new(DIR_HEADER).style(bold))
        .block(Block::bordered().title(" hot directories (name operations) "));
    f.render_widget(table, dirs);
    let help = if ui.editing {
        format!("filter: {}_   (Enter keep, Esc clear)", ui.filter)
    } else {
        format!(
            "q quit  s order  / filter  p {}",
            if ui.paused {
                "resume (paused)"
            } else {
                "pause"
            }
        )
    };
    f.render_widget(Paragraph::new(Line::from(help)), foot);
}

/// Apply one key; false when the view should end.
fn key(ui: &mut Ui, code: KeyCode) -> bool {
    if ui.editing {
        match code {
            KeyCode::Enter => ui.editing = false,
            KeyCode::Esc => {
                ui.editing = false;
                ui.filter.clear();
            }
            KeyCode::Backspace => {
                ui.filter.pop();
            }
            KeyCode::Char(c) => ui.filter.push(c),
            _ => {}
        }
        return true;
    }
    match code {
        KeyCode::Char('q') | KeyCode::Esc => return false,
        KeyCode::Char('s') => ui.order = ui.order.next(),
        KeyCode::Char('/') => ui.editing = true,
        KeyCode::Char('p') => ui.paused = !ui.paused,
        _ => {}
    }
    true
}

/// Run the live view until `q`, sampling with `snapshot` every `interval`.
pub fn interactive(
    mut snapshot: impl FnMut() -> Result<InstanceStatus>,
    interval: Duration,
) -> Result<()> {
    let mut prev = snapshot()?;
    let mut prev_at = Instant::now();
    // The first frame comes after a short interval so it shows rates.
    std::thread::sleep(interval.min(Duration::from_millis(200)));
    let mut ui = Ui {
        order: ClientOrder::Ops,
        filter: String::new(),
        editing: false,
        paused: false,
    };
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        let mut current = {
            let now = snapshot()?;
            let s = model::sample(
                &prev,
                &now,
                prev_at.elapsed().as_secs_f64(),
                model::proc_command,
            );
            (prev, prev_at) = (now, Instant::now());
            s
        };
        let mut next_at = Instant::now() + interval;
        loop {
            terminal.draw(|f| draw(f, &current, &ui))?;
            let wait = next_at.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press && !key(&mut ui, k.code) {
                        return Ok(());
                    }
                }
                continue;
            }
            next_at = Instant::now() + interval;
            if !ui.paused {
                let now = snapshot()?;
                current = model::sample(
                    &prev,
                    &now,
                    prev_at.elapsed().as_secs_f64(),
                    model::proc_command,
                );
                (prev, prev_at) = (now, Instant::now());
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_order_filter_and_quit() {
        let mut ui = Ui {
            order: ClientOrder::Ops,
            filter: String::new(),
            editing: false,
            paused: false,
        };
        assert!(key(&mut ui, KeyCode::Char('s')));
        assert_eq!(ui.order, ClientOrder::Traps);
        for k in [
            KeyCode::Char('/'),
            KeyCode::Char('m'),
            KeyCode::Char('k'),
            KeyCode::Enter,
        ] {
            assert!(key(&mut ui, k));
        }
        assert_eq!(ui.filter, "mk");
        assert!(!ui.editing);
        // While editing, `q` is text, not quit.
        key(&mut ui, KeyCode::Char('/'));
        assert!(key(&mut ui, KeyCode::Char('q')));
        key(&mut ui, KeyCode::Esc);
        assert!(ui.filter.is_empty());
        assert!(!key(&mut ui, KeyCode::Char('q')));
    }

    #[test]
    fn text_has_a_row_per_server_and_client() {
        let s = Sample {
            id: "i".into(),
            mount: "/atoll".into(),
            poll: "block".into(),
            interval_s: 1.0,
            servers: vec![ServerRow {
                server: 1,
                core: 0,
                ops_per_s: 12.0,
                top_ops: vec![("Open".into(), 12.0)],
                busy_pct: 3.0,
                ring_bytes: 0,
                channels: 2,
                sessions: 1,
                inodes: 4,
                blocks_used: 5,
                blocks_total: 10,
                restarts: 0,
            }],
            clients: vec![ClientRow {
                session: 9,
                pid: 77,
                command: "make".into(),
                ops_per_s: 12.0,
                traps_per_s: 1.0,
                dcache_hit_pct: Some(50.0),
            }],
            limits: vec![("inodes".into(), 4, 100)],
            dirs: vec![DirRow {
                ino: 4242,
                path: "/atoll/src".into(),
                distributed: true,
                ops_per_s: 30.0,
                servers: vec![1, 0],
            }],
        };
        let t = text(&s, ClientOrder::Ops, "");
        assert!(t.contains("inodes 4/100"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("1 ") && l.contains("5/10") && l.contains("Open 12")),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("77 ") && l.contains("make") && l.contains("50.0")),
            "{t}"
        );
        assert!(
            t.lines().any(|l| l.starts_with("4242 ")
                && l.contains("yes")
                && l.contains("1,0")
                && l.ends_with("/atoll/src")),
            "{t}"
        );
        assert!(!text(&s, ClientOrder::Ops, "cc1").contains("make"));
    }
}
