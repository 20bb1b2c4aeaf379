"""Running fleet's processes: settings, the command line, environment files, application modules, stop
signals, supervisord configuration, and command jobs with their process trees."""
