"""What a process tells: its event logs, the text it prints, and its traces (OpenTelemetry)."""
