"""How many hosts a run works on at once unless `-f/--forks` says otherwise (chosen: Ansible's
default is 5, https://docs.ansible.com/ansible/latest/reference_appendices/config.html#default-forks;
16 keeps a rack busy over one control machine's SSH). Imports nothing.
"""
DEFAULT_FORKS = 16
