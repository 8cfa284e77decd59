//! `captureScreen`: a PNG of a virtual display, display gating, create-new output.

use super::support::{display_number, run, tempdir, xvfb_present};
use intendant_protocol::runtime::ScreenResult;
use serde_json::json;

#[test]
fn screenshot_decodes_as_a_png_of_the_display_size() {
    if !xvfb_present() {
        return;
    }
    let dir = tempdir();
    let n = display_number(2);
    let r = run(
        json!([{"function":"captureScreen","nonce":3,"display":n}]),
        dir.path(),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let res: ScreenResult = r.data(0);
    assert_eq!(res.display, format!(":{n}"));
    assert_eq!(
        res.path,
        dir.path().join("screenshot_3.png").display().to_string()
    );
    assert_eq!((res.width, res.height), (1280, 800));
    let decoder = png::Decoder::new(std::fs::File::open(&res.path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).unwrap();
    assert_eq!((frame.width, frame.height), (1280, 800));
    assert_eq!(frame.color_type, png::ColorType::Rgb);
}

#[test]
fn an_existing_screenshot_or_symlink_is_never_overwritten_and_aborts() {
    if !xvfb_present() {
        return;
    }
    let dir = tempdir();
    let n = display_number(3);
    let target = dir.path().join("victim");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("screenshot_1.png")).unwrap();
    let r = run(
        json!([
            {"function":"captureScreen","nonce":1,"display":n},
            {"function":"execAsAgent","nonce":2,"command":"true"},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 1);
    assert_eq!(r.envelopes.len(), 1);
    assert!(r.error(0).contains("screenshot_1.png"), "{}", r.error(0));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
}

#[test]
fn user_display_is_refused_without_the_grant() {
    let dir = tempdir();
    let r = run(
        json!([{"function":"captureScreen","nonce":1,"display":0}]),
        dir.path(),
    );
    assert_eq!(r.code(), 1);
    assert!(r.error(0).contains("user's session display"));
}
