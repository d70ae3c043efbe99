//! libatoll preload library. STUB.
