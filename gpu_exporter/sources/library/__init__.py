"""What every vendor read through a management library (NVML, HLML) shares: per-device
lanes that keep a hung call to its own device (`lanes`), and one way to sort a library's
answers into absent, lost, gone and failed (`calls`)."""
