"""sushy-tools' Redfish emulator, started for tests with firmware versions its fake driver lacks."""
