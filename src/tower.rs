//! A tower `Layer` around any `Service` (being written).
