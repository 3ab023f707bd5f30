//! The dashboard's static files, compiled into the binary (no CDN, nothing to install).

const INDEX: &str = include_str!("../assets/dashboard/index.html");
const SCRIPT: &str = include_str!("../assets/dashboard/dashboard.js");
const STYLE: &str = include_str!("../assets/dashboard/dashboard.css");

/// The content type and bytes of a dashboard file, by path.
pub(super) fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    match path {
        "/admin/" | "/admin/index.html" => Some(("text/html; charset=utf-8", INDEX.as_bytes())),
        "/admin/dashboard.js" => Some(("text/javascript; charset=utf-8", SCRIPT.as_bytes())),
        "/admin/dashboard.css" => Some(("text/css; charset=utf-8", STYLE.as_bytes())),
        _ => None,
    }
}
