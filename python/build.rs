//! Gives this crate PyO3's `cfg`s for the interpreter it is built for
//! (`Py_GIL_DISABLED` on a free-threaded CPython: `GilCell` refuses it).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
