"""What the user writes, loaded and checked before any host is contacted: YAML files with line
numbers (`yamlfile`), key and type checks (`schema`), the inventory, recipes and Jinja2
templates. Every mistake is one `InputError` naming the file and line.
"""
