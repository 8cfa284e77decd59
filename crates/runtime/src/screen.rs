//! `captureScreen`: a PNG of an X display's root window, pure Rust (x11rb + png).
//!
//! The root window is read with one `GetImage` (ZPixmap) and converted to 8-bit RGB through the
//! root visual's channel masks, so any TrueColor depth works. The PNG is created new (never over
//! an existing file or symlink) as `<log_dir>/screenshot_<nonce>.png`.

use intendant_protocol::runtime::ScreenResult;
use std::io::{self, BufWriter};
use std::path::Path;
use thiserror::Error;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder, Screen, Visualtype};

use crate::artifact;

/// Why a screenshot failed (the batch aborts).
#[derive(Debug, Error)]
pub enum ScreenError {
    /// Connecting to the X server failed.
    #[error("cannot connect to X display {display}: {message}")]
    Connect {
        /// The display.
        display: String,
        /// The x11rb error.
        message: String,
    },
    /// The server refused or failed the request.
    #[error("X request failed on {display}: {message}")]
    Request {
        /// The display.
        display: String,
        /// The x11rb error.
        message: String,
    },
    /// The image format is not one this capture understands.
    #[error("unsupported screen format on {display}: {message}")]
    Format {
        /// The display.
        display: String,
        /// What is unsupported.
        message: String,
    },
    /// The PNG could not be written.
    #[error("cannot write {path}: {message}")]
    Write {
        /// The PNG path.
        path: String,
        /// The error.
        message: String,
    },
}

/// Captures display `display` (e.g. `:99`) into `<log_dir>/screenshot_<nonce>.png`.
pub fn capture(log_dir: &Path, nonce: u64, display: &str) -> Result<ScreenResult, ScreenError> {
    let (rgb, width, height) = grab(display)?;
    let path = log_dir.join(format!("screenshot_{nonce}.png"));
    let write_err = |message: String| ScreenError::Write {
        path: path.display().to_string(),
        message,
    };
    let file = artifact::create_new(&path, 0o600).map_err(|e| write_err(e.to_string()))?;
    let encoded = encode_png(BufWriter::new(file), width, height, &rgb);
    if let Err(message) = encoded {
        let _ = std::fs::remove_file(&path);
        return Err(write_err(message));
    }
    Ok(ScreenResult {
        path: path.display().to_string(),
        display: display.to_owned(),
        width,
        height,
    })
}

fn encode_png(out: impl io::Write, width: u32, height: u32, rgb: &[u8]) -> Result<(), String> {
    let mut enc = png::Encoder::new(out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())
}

/// Reads the root window of `display` as packed 8-bit RGB.
fn grab(display: &str) -> Result<(Vec<u8>, u32, u32), ScreenError> {
    let (conn, screen_num) = x11rb::connect(Some(display)).map_err(|e| ScreenError::Connect {
        display: display.to_owned(),
        message: e.to_string(),
    })?;
    let request_err = |e: &dyn std::fmt::Display| ScreenError::Request {
        display: display.to_owned(),
        message: e.to_string(),
    };
    let format_err = |message: String| ScreenError::Format {
        display: display.to_owned(),
        message,
    };
    let setup = conn.setup();
    let screen = setup
        .roots
        .get(screen_num)
        .ok_or_else(|| format_err(format!("screen {screen_num} not in the setup")))?;
    let (w, h) = (screen.width_in_pixels, screen.height_in_pixels);
    let reply = conn
        .get_image(ImageFormat::Z_PIXMAP, screen.root, 0, 0, w, h, u32::MAX)
        .map_err(|e| request_err(&e))?
        .reply()
        .map_err(|e| request_err(&e))?;
    let format = setup
        .pixmap_formats
        .iter()
        .find(|f| f.depth == reply.depth)
        .ok_or_else(|| format_err(format!("no pixmap format for depth {}", reply.depth)))?;
    let visual = find_visual(screen, reply.visual)
        .ok_or_else(|| format_err(format!("visual {} not found", reply.visual)))?;
    let layout = Layout {
        width: usize::from(w),
        height: usize::from(h),
        bits_per_pixel: usize::from(format.bits_per_pixel),
        scanline_pad: usize::from(format.scanline_pad),
        msb_first: setup.image_byte_order == ImageOrder::MSB_FIRST,
        masks: [visual.red_mask, visual.green_mask, visual.blue_mask],
    };
    let rgb = layout.to_rgb(&reply.data).map_err(format_err)?;
    Ok((rgb, u32::from(w), u32::from(h)))
}

fn find_visual(screen: &Screen, id: u32) -> Option<Visualtype> {
    screen
        .allowed_depths
        .iter()
        .flat_map(|d| d.visuals.iter())
        .find(|v| v.visual_id == id)
        .copied()
}

/// How the pixels of a ZPixmap image are laid out.
#[derive(Debug, Clone, Copy)]
struct Layout {
    width: usize,
    height: usize,
    bits_per_pixel: usize,
    scanline_pad: usize,
    msb_first: bool,
    masks: [u32; 3],
}

impl Layout {
    fn to_rgb(self, data: &[u8]) -> Result<Vec<u8>, String> {
        let bytes_pp = match self.bits_per_pixel {
            8 | 16 | 24 | 32 => self.bits_per_pixel / 8,
            other => return Err(format!("{other} bits per pixel")),
        };
        let pad = self.scanline_pad.max(8);
        let stride = (self.width * self.bits_per_pixel).div_ceil(pad) * pad / 8;
        if data.len() < stride * self.height {
            return Err(format!(
                "image has {} bytes, expected {}",
                data.len(),
                stride * self.height
            ));
        }
        let mut out = Vec::with_capacity(self.width * self.height * 3);
        for row in data.chunks(stride).take(self.height) {
            for px in row.chunks(bytes_pp).take(self.width) {
                let value = if self.msb_first {
                    px.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b))
                } else {
                    px.iter().rev().fold(0u32, |v, b| (v << 8) | u32::from(*b))
                };
                for mask in self.masks {
                    out.push(channel(value, mask));
                }
            }
        }
        Ok(out)
    }
}

/// Scales the bits of `value` under `mask` to 0..=255.
fn channel(value: u32, mask: u32) -> u8 {
    if mask == 0 {
        return 0;
    }
    let shifted = (value & mask) >> mask.trailing_zeros();
    let max = mask >> mask.trailing_zeros();
    u8::try_from(u64::from(shifted) * 255 / u64::from(max)).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_bgrx_and_rgb565() {
        let l = Layout {
            width: 2,
            height: 1,
            bits_per_pixel: 32,
            scanline_pad: 32,
            msb_first: false,
            masks: [0xff0000, 0xff00, 0xff],
        };
        assert_eq!(
            l.to_rgb(&[1, 2, 3, 0, 0xff, 0, 0, 0]).unwrap(),
            vec![3, 2, 1, 0, 0, 0xff]
        );
        let l = Layout {
            width: 1,
            height: 1,
            bits_per_pixel: 16,
            scanline_pad: 32,
            msb_first: false,
            masks: [0xf800, 0x07e0, 0x001f],
        };
        assert_eq!(l.to_rgb(&[0x1f, 0xf8, 0, 0]).unwrap(), vec![255, 0, 255]);
        assert!(l.to_rgb(&[0]).is_err());
    }
}
