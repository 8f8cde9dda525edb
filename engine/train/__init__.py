"""What trainers read and how they are launched: data exports, preference pairs, trainer checks."""
