//! `spear_alloc` / `spear_free`: where the host puts tool arguments and
//! output when the session has no tool arena.

use std::alloc::{alloc, dealloc, Layout};

// 8 matches the alignment SPEAR's arena layout gives the output and length word.
const ALIGN: usize = 8;

fn layout(size: i32) -> Option<Layout> {
    if size < 0 {
        return None;
    }
    Layout::from_size_align((size as usize).max(1), ALIGN).ok()
}

#[no_mangle]
pub extern "C" fn spear_alloc(size: i32) -> i32 {
    match layout(size) {
        Some(l) => unsafe { alloc(l) as usize as i32 },
        None => 0,
    }
}

#[no_mangle]
pub extern "C" fn spear_free(ptr: i32, size: i32) {
    if let (true, Some(l)) = (ptr != 0, layout(size)) {
        unsafe { dealloc(ptr as usize as *mut u8, l) }
    }
}
