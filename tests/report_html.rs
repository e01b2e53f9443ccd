//! `commtune report --html` and `--compare` on reports of real runs, the pages loaded in a real
//! headless Chromium (Debian's, installed by scripts/install-deps): no console message, the
//! script ran (sorting, filtering and the `#only=` view applied from the address), every site
//! in the table and in the details, and the plots drawn (the screenshot holds the operations'
//! and the tuning phases' colours).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::{OpenMpi, compile_c, compile_example, root, run, scratch};
use serde_json::Value;

fn commtune(args: &[&str], dir: &Path) -> std::process::Output {
    let out = Command::new(root().join("target/release/commtune"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run commtune");
    assert!(
        out.status.success(),
        "commtune {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What Chromium made of a page.
struct Loaded {
    /// The DOM after the page's script ran.
    dom: String,
    /// Console messages (any: the page writes none).
    console: Vec<String>,
}

static PROFILES: AtomicUsize = AtomicUsize::new(0);

/// Chromium as the machine notes say it runs here: headless, as root without the sandbox, and
/// with no background connections (the network is closed); a new empty profile each time.
fn chromium(dir: &Path, args: &[&str], page: &Path, hash: &str) -> std::process::Output {
    let profile = dir.join(format!(
        "chromium-profile-{}",
        PROFILES.fetch_add(1, Ordering::Relaxed)
    ));
    // output() reads while it waits: a page's DOM is megabytes, more than a pipe holds.
    let mut cmd = Command::new("timeout");
    cmd.args([
        "120",
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(format!("file://{}{hash}", page.display()));
    let out = cmd.output().expect("run chromium");
    let _ = std::fs::remove_dir_all(profile);
    out
}

fn load(dir: &Path, page: &Path, hash: &str) -> Loaded {
    let out = chromium(dir, &["--dump-dom"], page, hash);
    let stderr = String::from_utf8_lossy(&out.stderr);
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(String::from)
            .collect(),
    }
}

/// A screenshot of the top `height` pixels of the page, as RGB pixels.
fn screenshot(dir: &Path, page: &Path, hash: &str, height: u32) -> Vec<[u8; 3]> {
    let png = dir.join("screenshot.png");
    let _ = std::fs::remove_file(&png);
    chromium(
        dir,
        &[
            &format!("--window-size=1280,{height}"),
            &format!("--screenshot={}", png.display()),
        ],
        page,
        hash,
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png).expect("Chromium wrote the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buffer = vec![0; reader.output_buffer_size().expect("its size")];
    let info = reader.next_frame(&mut buffer).expect("its pixels");
    let channels = info.color_type.samples();
    buffer[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// Pixels of exactly `hex` (#rrggbb): flat fills of bars, cells and bands are drawn exact.
fn count(pixels: &[[u8; 3]], hex: &str) -> usize {
    let v = u32::from_str_radix(&hex[1..], 16).unwrap();
    let rgb = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
    pixels.iter().filter(|p| **p == rgb).count()
}

/// The table's row ids in document order, and which are hidden.
fn rows(dom: &str) -> Vec<(usize, bool)> {
    dom.split("<tr id=\"row-")
        .skip(1)
        .map(|rest| {
            let end = rest.find('"').unwrap();
            let tag_end = rest.find('>').unwrap();
            (
                rest[..end].parse().unwrap(),
                rest[..tag_end].contains("hidden"),
            )
        })
        .collect()
}

fn sites(report: &Value) -> &Vec<Value> {
    report["sites"].as_array().expect("sites")
}

fn check_loaded(page: &Loaded, sites: usize) {
    assert!(page.console.is_empty(), "console: {:?}", page.console);
    assert!(
        page.dom.contains("data-ready=\""),
        "the script ran to its end"
    );
    assert_eq!(rows(&page.dom).len(), sites, "every site in the table");
    assert_eq!(page.dom.matches("<details class=\"site\"").count(), sites);
}

/// The example under the tuner: every operation, one tuned allreduce with its timeline.
fn example_report(dir: &Path, mode: &str) -> PathBuf {
    let exe = compile_example(OpenMpi, dir);
    let job = run(OpenMpi, 4, &exe, dir)
        .args(&["64", "600"])
        .env("COMMTUNE_MODE", mode)
        .env("COMMTUNE_REPORT", &format!("{mode}.json"))
        .go();
    job.assert_success();
    dir.join(format!("{mode}.json"))
}

#[test]
fn console_messages_are_seen() {
    // The check the page tests rely on: a page that logs, or throws, is caught.
    let dir = scratch("report_html_console");
    let page = dir.join("bad.html");
    std::fs::write(
        &page,
        "<html><body><script>console.error('boom'); missing();</script></body></html>",
    )
    .unwrap();
    let loaded = load(&dir, &page, "");
    assert_eq!(loaded.console.len(), 2, "{:?}", loaded.console);
    assert!(loaded.console[1].contains("Uncaught ReferenceError"));
}

#[test]
fn bundled_example_page() {
    let dir = scratch("report_html_example");
    let json = example_report(&dir, "tune");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let n = sites(&report).len();
    commtune(&["report", "tune.json", "--html", "page.html"], &dir);
    let page = dir.join("page.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "self-contained"
    );

    let loaded = load(&dir, &page, "");
    check_loaded(&loaded, n);
    for id in [
        "overview",
        "imbalance",
        "sites",
        "details",
        "hosts",
        "mpi",
        "wall",
    ] {
        assert!(loaded.dom.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(loaded.dom.contains("4 of 4 sites") || n != 4);
    let tuned = sites(&report)
        .iter()
        .position(|s| s["tuning"]["timeline"].is_array())
        .expect("a tuned site with a timeline");
    assert!(loaded.dom.contains("class=\"plot timeline\""));
    // Halo episodes list each rank's messages.
    let halo = sites(&report)
        .iter()
        .position(|s| s["op"] == "halo")
        .unwrap();
    let detail = loaded
        .dom
        .split(&format!("id=\"site-{halo}\""))
        .nth(1)
        .unwrap();
    assert!(detail.contains("Messages of the episode per rank"));

    // Sorted by calls, most first; then filtered to the alltoall.
    let most_calls = (0..n)
        .max_by_key(|&i| (sites(&report)[i]["calls"].as_u64(), std::cmp::Reverse(i)))
        .unwrap();
    let sorted = load(&dir, &page, "#sort=calls&order=desc");
    assert_eq!(rows(&sorted.dom)[0].0, most_calls, "sorted by calls");
    assert!(sorted.console.is_empty(), "{:?}", sorted.console);
    let filtered = load(&dir, &page, "#q=alltoall");
    let shown: Vec<usize> = rows(&filtered.dom)
        .into_iter()
        .filter(|r| !r.1)
        .map(|r| r.0)
        .collect();
    let alltoall: Vec<usize> = (0..n)
        .filter(|&i| sites(&report)[i]["op"] == "alltoall")
        .collect();
    assert_eq!(shown, alltoall);

    // The plots are drawn: a bar in each operation's colour (a bar's length is its share of
    // the run, so an operation of a tiny share is only in the page; the largest one spans its
    // chart), heat-map cells (the darkest is each row's largest), and the tuned site's phases.
    let top = screenshot(&dir, &page, "", 1600);
    let colours = [
        ("allreduce", "#4e79a7"),
        ("alltoall", "#f28e2b"),
        ("allgatherv", "#59a14f"),
        ("halo", "#b07aa1"),
    ];
    for (op, colour) in colours {
        if sites(&report).iter().any(|s| s["op"] == op) {
            assert!(loaded.dom.contains(&format!("fill=\"{colour}\"")), "{op}");
        }
    }
    let share = |s: &Value| s["time"]["share"].as_f64().unwrap();
    let largest = sites(&report)
        .iter()
        .max_by(|a, b| share(a).total_cmp(&share(b)))
        .unwrap();
    let (_, colour) = colours.iter().find(|(op, _)| largest["op"] == *op).unwrap();
    for colour in [colour, "#08306b"] {
        assert!(
            count(&top, colour) > 100,
            "{colour}: {}",
            count(&top, colour)
        );
    }
    let tuned_view = screenshot(&dir, &page, &format!("#only=site-{tuned}"), 1400);
    for band in ["#fff3c4", "#dff0d8"] {
        assert!(count(&tuned_view, band) > 500, "{band}");
    }
    assert_eq!(
        count(&tuned_view, "#08306b"),
        0,
        "only the tuned site: no heat map"
    );
}

/// A program with `SITES` allreduce call sites, one per line: a report as large as a real
/// application's (an MD code at 4 ranks had 232).
const SITES: usize = 240;

fn many_sites_program(dir: &Path) -> PathBuf {
    let mut source = String::from(
        "#include <mpi.h>\nint main(int argc, char **argv) {\n    MPI_Init(&argc, &argv);\n\
         \x20   static double x[512], y[512];\n    for (int it = 0; it < 12; it++) {\n",
    );
    for i in 0..SITES {
        source.push_str(&format!(
            "        MPI_Allreduce(x, y, {}, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);\n",
            1 + (i % 8) * 64
        ));
    }
    source.push_str("    }\n    MPI_Finalize();\n    return 0;\n}\n");
    let src = dir.join("many.c");
    std::fs::write(&src, source).unwrap();
    let exe = dir.join("many");
    compile_c(OpenMpi, &src, &exe);
    exe
}

#[test]
fn a_report_of_many_sites() {
    let dir = scratch("report_html_many");
    let exe = many_sites_program(&dir);
    run(OpenMpi, 4, &exe, &dir)
        .env("COMMTUNE_MODE", "tune")
        .go()
        .assert_success();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert!(sites(&report).len() >= SITES, "{}", sites(&report).len());
    let start = Instant::now();
    commtune(&["report", "report.json", "--html", "many.html"], &dir);
    let took = start.elapsed();
    let page = dir.join("many.html");
    let size = std::fs::metadata(&page).unwrap().len();
    // The measure of "stays fast" (no timing is asserted on a shared machine): what was
    // written, and what the browser needed, printed for the record.
    let loaded = load(&dir, &page, "");
    let ready = loaded
        .dom
        .split("data-ready=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "{} sites: commtune report --html {took:?}, {size} bytes, script done {ready} ms \
         after navigation",
        sites(&report).len()
    );
    check_loaded(&loaded, sites(&report).len());
    assert!(size < 2 << 20, "{size} bytes");
    // One line among 240: its words match no other row.
    let filtered = load(&dir, &page, "#q=many.c:117%20");
    let shown = rows(&filtered.dom).iter().filter(|r| !r.1).count();
    assert_eq!(shown, 1, "{:?}", filtered.console);
}

#[test]
fn two_runs_compared() {
    let dir = scratch("report_html_compare");
    let a = example_report(&dir, "profile");
    let b = example_report(&dir, "tune");
    let out = commtune(
        &[
            "report",
            "profile.json",
            "tune.json",
            "--compare",
            "--top",
            "50",
        ],
        &dir,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("A = profile.json") && text.contains("B = tune.json"),
        "{text}"
    );
    let read =
        |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    let (ra, rb) = (read(&a), read(&b));
    // Same program, same sites: every one matched, with a ratio.
    assert_eq!(sites(&ra).len(), sites(&rb).len());
    for s in sites(&ra) {
        let location = s["location"].as_str().unwrap();
        let line = text
            .lines()
            .find(|l| l.ends_with(location) && l.contains(s["op"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{location} in\n{text}"));
        assert!(line.contains(" x"), "a ratio: {line}");
    }
    commtune(
        &[
            "report",
            "profile.json",
            "tune.json",
            "--compare",
            "--html",
            "compare.html",
        ],
        &dir,
    );
    let loaded = load(&dir, &dir.join("compare.html"), "");
    assert!(loaded.console.is_empty(), "{:?}", loaded.console);
    assert!(loaded.dom.contains("data-ready=\""));
    assert_eq!(
        loaded.dom.matches("<tr><td>").count(),
        sites(&ra).len(),
        "one row per site"
    );
}

#[test]
fn report_arguments_and_older_versions() {
    let dir = scratch("report_html_args");
    let v1 = r#"{"version":1,"mpi":"Test MPI 1.0","nprocs":2,"ranks_reporting":2,"run_time_s":1.0,"sites":[]}"#;
    std::fs::write(dir.join("v1.json"), v1).unwrap();
    commtune(&["report", "v1.json", "--html", "v1.html"], &dir);
    let page = std::fs::read_to_string(dir.join("v1.html")).unwrap();
    assert!(
        page.contains("not recorded (report version &lt; 3)"),
        "{page}"
    );
    let fail = |args: &[&str]| {
        let out = Command::new(root().join("target/release/commtune"))
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(fail(&["report", "v1.json", "--compare"]).contains("--compare needs two reports"));
    assert!(fail(&["report", "v1.json", "v1.json"]).contains("add --compare"));
}
