//! atoll bench. STUB.
