//! EndpointPickerConfig (work in progress).
